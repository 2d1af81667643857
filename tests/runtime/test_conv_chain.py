"""A depthwise Conv and the pointwise Conv that alone reads its result, each with its epilogue op
or none, as one prepared step of the CPU executor (runtime/fusions.py,
``_fuse_depthwise_pointwise``; runtime/kernels/conv.py ``_ConvChain``: the pointwise product reads
the depthwise sums channels-last where they are): against onnxruntime, bit for bit against the
ops run apart (offload.evaluate), bound and unbound, on two threads, in a shape specialization; and the
pairs that must not be fused. The chains are made on the numpy paths, where the compiled loops
are off (numba missing or ``OFFLOAD_JIT=0``): the compiled ``direct`` path writes the depthwise
result itself, and the last test checks that it is then not chained."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.conv import _ConvCall, _ConvChain
from offload.runtime.steps import _BoundRun, _FusedAway, _PreparedStep
from tests.reference import assert_close, sum_tolerance

from .harness import concurrently
from .onnx_graphs import model_bytes

pytestmark = pytest.mark.usefixtures("numpy_convs")

TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}

# (channels, height, width, pointwise channels out, kernel, strides, pads, dilations): the second
# conv has at most as many channels out as in, as MobileNets' and ShuffleNet's after a depthwise one
CASES = [
    (24, 13, 11, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (16, 17, 15, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    (12, 9, 10, 8, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    (8, 10, 9, 6, (3, 3), (1, 2), (0, 1, 2, 1), (2, 1)),
    (128, 7, 9, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # channels-last with zero channels after C
    (20, 1, 1, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
]
# (the depthwise conv's epilogue op, the pointwise conv's): MobileNetV2's, ShuffleNetV2's, others
EPILOGUES = [("Clip", None), (None, "Relu"), (None, None), ("HardSwish", "HardSigmoid"), ("Relu", "Clip")]


def _model(
    case,
    ops=(None, None),
    dtype=np.float32,
    batch=1,
    first: str = "Neg",
    bias: bool = True,
    also_output: bool = False,
    weights_in: bool = False,
    pointwise_group: int = 1,
    pointwise_kernel: tuple = (1, 1),
) -> bytes:
    """x -> first -> Conv (depthwise) [-> op] -> Conv (pointwise) [-> op] -> y; ``first`` Neg (the
    chain is bound) or Reshape (a kernel's result: unbound); ``also_output``: the depthwise
    result is a graph output too; ``weights_in``: the pointwise weights are a graph input."""
    c, h, w, m, kernel, strides, pads, dilations = case
    t = TYPES[dtype]
    rng = np.random.default_rng(sum(case[:4]))
    dims = [batch, c, h, w]
    inputs = [("x", t, dims)]
    inits = [("w1", (rng.standard_normal((c, 1, *kernel)) * 0.5).astype(dtype))]
    w2 = (rng.standard_normal((m, c // pointwise_group, *pointwise_kernel)) * 0.3).astype(dtype)
    if weights_in:
        inputs.append(("w2", t, list(w2.shape)))
    else:
        inits.append(("w2", w2))
    if bias:
        inits += [("b1", rng.standard_normal(c).astype(dtype)), ("b2", rng.standard_normal(m).astype(dtype))]
    if first == "Reshape":
        inits.append(("shape", np.array(dims if isinstance(batch, int) else [-1, c, h, w], np.int64)))
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"])]
    else:
        nodes = [helper.make_node("Neg", ["x"], ["r"])]
    inits += [("lo", np.array(0, dtype)), ("hi", np.array(6, dtype))]

    def conv(inp, weights, b, out, **attrs):
        nodes.append(helper.make_node("Conv", [inp, weights] + ([b] if bias else []), [out], **attrs))

    def epilogue(op, inp, out):
        if op is None:
            return inp
        nodes.append(helper.make_node(op, [inp, "lo", "hi"] if op == "Clip" else [inp], [out]))
        return out

    conv("r", "w1", "b1", "d", group=c, kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations)
    mid = epilogue(ops[0], "d", "da")
    pads2 = [k // 2 for k in pointwise_kernel] * 2
    conv(mid, "w2", "b2", "p", group=pointwise_group, kernel_shape=pointwise_kernel, pads=pads2)
    out = epilogue(ops[1], "p", "y")
    outputs = [(out, t, None)] + ([(mid, t, None)] if also_output else [])
    return model_bytes(nodes, inputs, outputs, inits, opset=17)


def _chains(method) -> list:
    return [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _ConvChain)]


def _feeds(case, dtype=np.float32, batch=1, seed=0, weights_in=False) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((batch,) + case[:3]).astype(dtype)}
    if weights_in:
        feeds["w2"] = (rng.standard_normal((case[3], case[0], 1, 1)) * 0.3).astype(dtype)
    return feeds


def _check(data: bytes, feeds: dict, method, runs: int = 2) -> None:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = session.run(None, feeds)
    evaluated = offload.evaluate(offload.load(data), feeds)
    for _ in range(runs):  # the second run reuses the buffers and calls of the first
        got = method.run(feeds)
        for name, want in zip(names, expected):
            scale = np.abs(want).max()
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5 * scale)
            np.testing.assert_array_equal(got[name], evaluated[name])


@pytest.mark.parametrize("ops", EPILOGUES, ids=lambda o: f"{o[0]}-{o[1]}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-k{c[4]}-s{c[5]}-d{c[7]}")
def test_chain_matches_onnxruntime_and_the_convs_apart(case, ops):
    data = _model(case, ops)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = _chains(method)
    assert step.call.depthwise.recipe.path == "last" and step.call.pointwise.recipe.path == "pointwise"
    got_ops = [c.epilogue.op if c.epilogue else None for c in (step.call.depthwise, step.call.pointwise)]
    assert got_ops == list(ops)
    assert any(isinstance(s, _BoundRun) and step in s.steps for s in method._fast_steps)  # bound
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == 1 + sum(op is not None for op in ops)
    _check(data, _feeds(case), method)


@pytest.mark.parametrize("case", CASES[:2], ids=["s1", "s2"])
def test_chain_without_bias_and_on_a_batch(case):
    for kwargs in (dict(bias=False), dict(batch=3)):
        data = _model(case, ("Clip", "Relu"), **kwargs)
        method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
        assert len(_chains(method)) == 1, kwargs
        _check(data, _feeds(case, batch=kwargs.get("batch", 1)), method)


def _numpy_chain(case, x, w1, b1, w2, b2):
    """Clip(0, 6) of the depthwise conv, then Relu of the pointwise one, by numpy's formulas."""
    c, _, _, _, (kh, kw), (sh, sw), pads, (dh, dw) = case
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    d = np.zeros((x.shape[0], c, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
            d += tap * w1[:, 0, i, j][None, :, None, None]
    d = np.clip(d + b1[None, :, None, None], 0, 6)
    return np.maximum(np.einsum("mc,nchw->nmhw", w2[:, :, 0, 0], d) + b2[None, :, None, None], 0)


@pytest.mark.parametrize("case", CASES[:4], ids=["s1", "s2", "k5", "dilated"])
def test_chain_in_float64(case):
    """onnxruntime has no float64 Conv: numpy's formulas are the reference."""
    data = _model(case, ("Clip", "Relu"), dtype=np.float64, batch=2)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert len(_chains(method)) == 1
    feeds = _feeds(case, np.float64, 2)
    inits = {t.name: t for t in onnx.load_from_string(data).graph.initializer}
    w1, b1, w2, b2 = (numpy_helper.to_array(inits[k]) for k in ("w1", "b1", "w2", "b2"))
    expected = _numpy_chain(case, feeds["x"] * -1, w1, b1, w2, b2)  # x -> Neg first
    evaluated = offload.evaluate(offload.load(data), feeds)["y"]
    for _ in range(2):
        got = method.run(feeds)["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
        np.testing.assert_array_equal(got, evaluated)


def test_unbound_chain_of_a_kernel_result():
    case = CASES[0]
    data = _model(case, ("Clip", None), batch=2, first="Reshape")
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert len(_chains(method)) == 1
    for seed in range(2):  # new input arrays: the calls are made again for them
        _check(data, _feeds(case, batch=2, seed=seed), method, runs=1)


def test_chain_in_a_shape_specialization():
    """A symbolic batch: the steps are prepared per input shape (``_ShapeSpecialization``), fused there too."""
    case = CASES[1]
    data = _model(case, ("Clip", "Relu"), batch="N", first="Reshape")
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    for batch in (1, 2, 1, 2):
        _check(data, _feeds(case, batch=batch, seed=batch), method, runs=1)
    plans = list(method._specializations.entries.values())
    assert any(
        isinstance(s, _PreparedStep) and isinstance(s.call, _ConvChain) for p in plans for s in p.steps
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(also_output=True),  # the depthwise result is read elsewhere: it must be written
        dict(weights_in=True),  # pointwise weights given at run: maybe in an arena the chain writes
        dict(pointwise_kernel=(3, 3)),
    ],
    ids=["result", "weights-in", "not-pointwise"],
)
def test_pairs_that_are_not_chained(kwargs):
    case = CASES[0]
    data = _model(case, ("Clip", None), **kwargs)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _chains(method)
    _check(data, _feeds(case, weights_in=kwargs.get("weights_in", False)), method)


@pytest.mark.parametrize("group", [2, 4, 8])
@pytest.mark.parametrize("case", CASES[:2], ids=["s1", "s2"])
def test_a_grouped_pointwise_conv_is_chained(case, group):
    """ShuffleNet's grouped 1 x 1 conv after its depthwise one: one product per group, each
    reading its channels of the depthwise sums where they are, as numpy's stacked product of the
    conv apart makes one per group."""
    data = _model(case, (None, "Relu"), pointwise_group=group)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = _chains(method)
    assert step.call.pointwise.recipe.group == group
    _check(data, _feeds(case), method)


# depthwise convs on the rows path (maps over 64 x 64): chained at stride 1, where the chain's
# einsum over all taps sums them in the rows path's order (the same bits), not at stride 2
ROWS = [
    ((16, 70, 66, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), True),
    ((8, 67, 71, 8, (3, 5), (1, 1), (1, 2, 0, 1), (2, 1)), True),
    ((16, 70, 66, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)), False),
]


@pytest.mark.parametrize("case, chained", ROWS, ids=["s1", "s1-dilated", "s2"])
def test_a_depthwise_conv_on_the_rows_path(case, chained):
    data = _model(case, ("Relu", None))
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    convs = [s.call for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _ConvCall)]
    if chained:
        (step,) = _chains(method)
        assert step.call.depthwise.recipe.path == "rows"
    else:
        assert not _chains(method) and convs[0].recipe.path == "rows"
    _check(data, _feeds(case), method)


def test_two_threads_run_the_chain():
    case = CASES[0]
    data = _model(case, ("HardSwish", "Relu"))
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert len(_chains(method)) == 1
    feeds = [_feeds(case, seed=s) for s in range(2)]
    expected = [offload.evaluate(offload.load(data), f)["y"] for f in feeds]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for f, want in zip(feeds, expected):  # evaluate's bits held to onnxruntime first: the
        # longest sum is the 3 x 3 depthwise taps, then the pointwise conv's C products
        (independent,) = session.run(["y"], f)
        assert_close(want, independent, rtol=sum_tolerance(np.float32, 9 + case[0]))

    def work(k):
        for _ in range(20):
            np.testing.assert_array_equal(method.run(feeds[k])["y"], expected[k])

    concurrently(work)


def test_an_expanding_pointwise_conv_with_bias_is_not_chained():
    """More channels out than in, with a bias: its plan sums the bias in the product (a row of
    ones under the operand, ``_ConvRecipe.bias_in_product``), which the chain does not; without
    a bias it is chained."""
    case = (8, 10, 9, 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    for bias in (True, False):
        data = _model(case, ("Relu", "Clip"), bias=bias)
        method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
        assert len(_chains(method)) == (0 if bias else 1)
        _check(data, _feeds(case), method)
