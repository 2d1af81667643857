"""The patterns of tf2onnx's audio convnets (openWakeWord's embedding, the speechmos models) on
the CPU executor: Conv or BatchNormalization -> LeakyRelu -> Max with a (1, 1, 1, 1) constant
fused into one prepared step (the one-element operand read as its value, runtime/kernels/conv.py
``_epilogue``), and the column matrix of 1 x 3 and 3 x 1 kernels on maps a few columns wide
copied a tap's rows at a time (runtime/kernels/loops.py ``im2col_runs``), and a conv of one
image written over its input without a copy of it first (runtime/kernels/conv_recipe.py
``_ConvRecipe.calls``). Against onnxruntime, bit for bit against the ops run apart
(offload.evaluate), the column matrix against numpy's."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from offload.runtime.kernels import _util
from offload.runtime.kernels.conv import _Conv1dCall, _ConvCall
from offload.runtime.kernels.normalization import _BatchNormCall
from offload.runtime.steps import _FusedAway, _PreparedStep

from .harness import checked_method
from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _model(first: str, x_shape: tuple, floor_shape: tuple, kernel: tuple = (1, 3)) -> bytes:
    """x -> Neg -> first (Conv with bias, or BatchNormalization) -> LeakyRelu (0.2) -> Max(floor)
    -> y, floor = -0.3 of ``floor_shape``."""
    c = x_shape[1]
    rng = np.random.default_rng(c + len(floor_shape))
    inits = [("floor", np.full(floor_shape, -0.3, np.float32))]
    nodes = [helper.make_node("Neg", ["x"], ["r"])]
    if first == "Conv":
        w_shape = (c + 8, c, *kernel)
        pads = [0, 1, 0, 1] if kernel == (1, 3) else [1, 1] if len(kernel) == 1 else [0, 0, 0, 0]
        inits += [
            ("w", (rng.standard_normal(w_shape) * 0.3).astype(np.float32)),
            ("b", rng.standard_normal(c + 8).astype(np.float32)),
        ]
        nodes.append(helper.make_node("Conv", ["r", "w", "b"], ["v"], kernel_shape=list(kernel), pads=pads))
    else:
        inits += [
            ("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
            ("bias", rng.standard_normal(c).astype(np.float32)),
            ("mean", rng.standard_normal(c).astype(np.float32)),
            ("var", rng.uniform(0.1, 2.0, c).astype(np.float32)),
        ]
        nodes.append(helper.make_node("BatchNormalization", ["r", "scale", "bias", "mean", "var"], ["v"]))
    nodes.append(helper.make_node("LeakyRelu", ["v"], ["l"], alpha=0.2))
    nodes.append(helper.make_node("Max", ["l", "floor"], ["y"]))
    return model_bytes(nodes, [("x", F32, list(x_shape))], [("y", F32, None)], inits, opset=17)


def _check(data: bytes, x_shape: tuple):
    """The method of ``data`` after runs that match onnxruntime and offload.evaluate."""
    feeds = [
        {"x": (np.random.default_rng(s).standard_normal(x_shape) * 2).astype(np.float32)} for s in (1, 2)
    ]
    return checked_method(data, feeds, rtol=1e-4, atol=1e-5)


def _first_call(method, kind):
    return next(s.call for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, kind))


@pytest.mark.parametrize(
    "first,kind,x_shape,floor_shape",
    [
        ("Conv", _ConvCall, (1, 8, 12, 6), (1, 1, 1, 1)),
        ("Conv", _ConvCall, (1, 8, 12, 6), (1,)),
        ("BatchNormalization", _BatchNormCall, (1, 8, 12, 6), (1, 1, 1, 1)),
        ("BatchNormalization", _BatchNormCall, (2, 5, 7, 3), ()),
    ],
)
def test_leaky_relu_and_a_one_value_max_fuse(first, kind, x_shape, floor_shape):
    method = _check(_model(first, x_shape, floor_shape), x_shape)
    call = _first_call(method, kind)
    assert (call.epilogue.op, call.epilogue.then.op) == ("LeakyRelu", "Max")
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == 2


def test_a_max_operand_of_higher_rank_than_the_result_is_not_fused():
    """Max with a (1, 1, 1, 1, 1) constant makes a 5-D result of the 4-D conv's: the Max step
    runs on its own (the LeakyRelu before it is fused)."""
    method = _check(_model("Conv", (1, 8, 12, 6), (1, 1, 1, 1, 1)), (1, 8, 12, 6))
    call = _first_call(method, _ConvCall)
    assert call.epilogue.op == "LeakyRelu" and call.epilogue.then is None
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == 1


@pytest.mark.parametrize("floor_shape,fused", [((1, 1, 1), True), ((1, 1, 1, 1), False)])
def test_a_1d_conv_fuses_a_max_operand_of_its_own_rank(floor_shape, fused):
    method = _check(_model("Conv", (1, 6, 20), floor_shape, kernel=(3,)), (1, 6, 20))
    call = _first_call(method, _Conv1dCall).inner
    assert call.epilogue.op == "LeakyRelu"
    assert (call.epilogue.then is not None) == fused


# (channels, height, width, kernel, pads (top, left, bottom, right), dilations): stride 1, output
# rows as wide as the input's (``im2col_runs``), then two that take the row by row loop
RUNS = [
    (24, 9, 32, (1, 3), (0, 1, 0, 1), (1, 1)),
    (7, 10, 8, (3, 1), (0, 0, 0, 0), (1, 1)),
    (5, 6, 4, (3, 3), (1, 1, 1, 1), (1, 1)),
    (3, 11, 6, (3, 3), (2, 2, 2, 2), (2, 2)),
    (2, 3, 5, (5, 1), (3, 0, 2, 0), (1, 1)),  # rows of padding alone, a tap past the input
    (4, 7, 9, (3, 3), (1, 1, 1, 1), (1, 2)),
    (4, 7, 9, (2, 4), (0, 1, 1, 2), (1, 1)),
]


@pytest.mark.skipif(_util.compiled_loops() is None, reason="numba is not installed here (or OFFLOAD_JIT=0)")
@pytest.mark.parametrize("case", RUNS)
def test_im2col_runs_give_the_windows(case):
    c, h, w, (kh, kw), (top, left, bottom, right), (dh, dw) = case
    loops = _util.compiled_loops()
    x = np.random.default_rng(c * h).standard_normal((c, h, w)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right)))
    oh, ow = padded.shape[1] - (kh - 1) * dh, padded.shape[2] - (kw - 1) * dw
    want = np.empty((c, kh, kw, oh, ow), np.float32)
    for ki in range(kh):
        for kj in range(kw):
            want[:, ki, kj] = padded[:, ki * dh : ki * dh + oh, kj * dw : kj * dw + ow]
    got = np.full(want.shape, np.nan, np.float32)
    loops.im2col(x, got, 1, 1, top, left, dh, dw)
    np.testing.assert_array_equal(got, want)
    if ow == w:  # the runs path: called directly too
        got[...] = np.nan
        loops.im2col_runs(x, got, top, left, dh, dw)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", [(1, 3), (3, 1)])
def test_narrow_convs_on_the_columns_path_match(kernel):
    x_shape = (1, 24, 16, 8)
    method = _check(_model("Conv", x_shape, (1, 1, 1, 1), kernel), x_shape)
    assert _first_call(method, _ConvCall).recipe.path == "columns"


# (input shape, weights shape, pads, path): one image whose result the memory plan may place over it
OVER_INPUT = [
    ((1, 16, 10, 8), (16, 16, 1, 3), (0, 1, 0, 1), "columns"),
    ((1, 16, 10, 8), (24, 16, 3, 1), (0, 0, 0, 0), "columns"),
    ((1, 32, 9, 7), (8, 32, 3, 3), (1, 1, 1, 1), "taps"),
    ((2, 16, 10, 8), (16, 16, 1, 3), (0, 1, 0, 1), "columns"),  # two images: copied first
]


@pytest.mark.parametrize("x_shape,w_shape,pads,path", OVER_INPUT)
def test_a_result_written_over_its_input(x_shape, w_shape, pads, path):
    """The columns and taps paths read all of one image before they write its result: with the
    output in the input's memory the same bits as apart, with no copy of the input for one image
    (a copy for two: the first image's result would overwrite the second's input)."""
    from offload.runtime.kernels import buffers, conv_recipe, windows

    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    g = windows._geometry("Conv", x_shape, w_shape[2:], "NOTSET", (1, 1), pads, (1, 1))
    plan = conv_recipe._ConvRecipe(x_shape, w_shape, np.float32, g, 1)
    assert plan.path == path
    apart = np.empty(plan.out_shape, np.float32)
    buffers._run_calls(plan.calls(apart, x, w, b, buffers._Buffers()))
    memory = np.empty(max(x.size, apart.size), np.float32)
    inside, out = memory[: x.size].reshape(x_shape), memory[: apart.size].reshape(plan.out_shape)
    inside[...] = x
    scratch = buffers._Buffers()
    buffers._run_calls(plan.calls(out, inside, w, b, scratch))
    np.testing.assert_array_equal(out, apart)
    assert any(role[0] == ("input",) for role in scratch.arrays) == (x_shape[0] > 1)
    (want,) = ort.InferenceSession(
        model_bytes(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads))],
            [("x", F32, list(x_shape))],
            [("y", F32, None)],
            [("w", w), ("b", b)],
            opset=17,
        ),
        providers=["CPUExecutionProvider"],
    ).run(None, {"x": x})
    np.testing.assert_allclose(apart, want, rtol=1e-4, atol=1e-4)
