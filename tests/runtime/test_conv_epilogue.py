"""A Conv and the elementwise op that alone reads its result (Relu, Clip, HardSwish, HardSigmoid)
as one prepared step of the CPU executor (runtime/fusions.py, ``_fuse_epilogues``; the op applied
per part of the output by the conv's plan, runtime/kernels/conv.py ``_Epilogue``): against
onnxruntime through each of the plan's paths, bit for bit against the two ops run apart
(offload.evaluate), bound and unbound; and the pairs that must not be fused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.steps import _FusedAway, _KernelPair, _PreparedStep

from .harness import plan_path
from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT

# (channels in, height, width, channels out, group, kernel, strides, pads, path)
CONVS = [
    (16, 70, 66, 16, 16, (3, 3), (1, 1), (1, 1, 1, 1), "rows"),
    (24, 17, 15, 24, 24, (5, 5), (2, 2), (2, 2, 2, 2), "last"),
    (128, 10, 9, 128, 128, (3, 3), (1, 1), (1, 1, 1, 1), "last"),  # with zero channels after C
    (24, 11, 13, 40, 1, (1, 1), (1, 1), (0, 0, 0, 0), "pointwise"),
    (3, 21, 19, 16, 1, (3, 3), (2, 2), (1, 1, 1, 1), "columns"),
]
OPS = ["Relu", "Clip", "HardSwish", "HardSigmoid"]


def _model(case, op: str, first: str = "Neg", extra_reader: bool = False, bounds_in: bool = False) -> bytes:
    """x -> first -> Conv (bias) -> op -> y; ``extra_reader``: the conv's result is also an
    output; ``bounds_in``: Clip's bounds are inputs of the graph, not constants."""
    c, h, w, m, group, kernel, strides, pads, _ = case
    rng = np.random.default_rng(sum(case[:5]))
    inits = [
        ("w", (rng.standard_normal((m, c // group, *kernel)) * 0.5).astype(np.float32)),
        ("b", rng.standard_normal(m).astype(np.float32)),
    ]
    inputs = [("x", F32, [1, c, h, w])]
    if first == "Reshape":  # a kernel's result: the Conv runs unbound
        inits.append(("shape", np.array([1, c, h, w], np.int64)))
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"])]
    else:
        nodes = [helper.make_node("Neg", ["x"], ["r"])]
    conv = dict(group=group, kernel_shape=kernel, strides=strides, pads=pads)
    nodes.append(helper.make_node("Conv", ["r", "w", "b"], ["c"], **conv))
    if op == "Clip":
        if bounds_in:
            inputs += [("lo", F32, []), ("hi", F32, [])]
        else:
            inits += [("lo", np.array(0, np.float32)), ("hi", np.array(6, np.float32))]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node(op, ["c"], ["y"]))
    outputs = [("y", F32, None)] + ([("c", F32, None)] if extra_reader else [])
    return model_bytes(nodes, inputs, outputs, inits, opset=17)


def _fused(method) -> list:
    return [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.kernel, _KernelPair)]


def _feeds(case, scale: float, bounds_in: bool = False) -> dict:
    c, h, w = case[:3]
    x = (np.random.default_rng(7).standard_normal((1, c, h, w)) * scale).astype(np.float32)
    feeds = {"x": x}
    if bounds_in:
        feeds.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
    return feeds


@pytest.mark.parametrize("first", ["Neg", "Reshape"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", CONVS, ids=[c[-1] for c in CONVS])
def test_fused_conv_matches_onnxruntime_and_the_ops_apart(case, op, first, conv_loops):
    data = _model(case, op, first)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    (step,) = _fused(method)
    assert step.call.recipe.path == plan_path(case[-1], conv_loops)
    assert step.kernel.second.op_name == f"onnx::{op}"
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == 1
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for scale in (1.0, 8.0):  # across the bends of ReLU6, HardSwish and HardSigmoid
        feeds = _feeds(case, scale)
        (want,) = session.run(None, feeds)
        for _ in range(2):  # the first run makes the calls; the second runs them again
            got = method.run(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])


def test_a_conv_result_read_elsewhere_is_not_fused():
    case = CONVS[1]
    data = _model(case, "Relu", extra_reader=True)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _fused(method)
    feeds = _feeds(case, 1.0)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = method.run(feeds)
    for name, expected in zip(("y", "c"), want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5)


def test_clip_bounds_given_at_run_are_not_fused():
    case = CONVS[3]
    data = _model(case, "Clip", bounds_in=True)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _fused(method)
    feeds = _feeds(case, 8.0, bounds_in=True)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(method.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)


def test_a_fused_conv_lists_both_instructions_and_profiles_as_conv():
    case = CONVS[0]
    method = offload.runtime.load(offload.save(offload.load(_model(case, "Clip")))).method("forward")
    names = [s.name for s in method.instructions]
    assert names[-2:] == ["onnx::Conv", "onnx::Clip"]
    conv, clip = method.instructions[-2:]
    assert clip.reads[0] == conv.writes[0]
    profile = offload.profile.Profile()
    method.run(_feeds(case, 1.0), profile=profile)
    ops = [e.args.get("op") for e in profile.events if e.cat == "kernel"]
    assert ops[-2:] == ["onnx::Conv", "onnx::Clip"]


def _chain_model(case, ops: list[str]) -> bytes:
    """x -> Neg -> Conv (bias) -> each of ``ops`` in turn -> y: LeakyRelu (alpha 0.2), Max or Min
    with a 0-d constant (-0.4, 0.7), Relu."""
    c, h, w, m, group, kernel, strides, pads, _ = case
    rng = np.random.default_rng(sum(case[:5]) + 1)
    inits = [
        ("w", (rng.standard_normal((m, c // group, *kernel)) * 0.5).astype(np.float32)),
        ("b", rng.standard_normal(m).astype(np.float32)),
        ("floor", np.array(-0.4, np.float32)),
        ("ceil", np.array(0.7, np.float32)),
    ]
    conv = dict(group=group, kernel_shape=kernel, strides=strides, pads=pads)
    nodes = [helper.make_node("Neg", ["x"], ["r"]), helper.make_node("Conv", ["r", "w", "b"], ["v0"], **conv)]
    for k, op in enumerate(ops):
        args = {"Max": ["floor"], "Min": ["ceil"]}.get(op, [])
        attrs = {"alpha": 0.2} if op == "LeakyRelu" else {}
        out = "y" if k == len(ops) - 1 else f"v{k + 1}"
        nodes.append(helper.make_node(op, [f"v{k}", *args], [out], **attrs))
    return model_bytes(nodes, [("x", F32, [1, c, h, w])], [("y", F32, None)], inits, opset=17)


@pytest.mark.parametrize("ops", [["LeakyRelu"], ["Max"], ["LeakyRelu", "Max"], ["Relu", "Min", "Max"]])
@pytest.mark.parametrize("case", CONVS, ids=[c[-1] for c in CONVS])
def test_a_chain_of_elementwise_ops_fuses_into_the_conv(case, ops, conv_loops):
    """Conv -> LeakyRelu -> Max (a TFLite leaky ReLU with a floor) and longer chains: one fused
    step, each op's own step running nothing; against onnxruntime, and bit for bit the ops apart."""
    data = _chain_model(case, ops)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    assert len(_fused(method)) == 1
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == len(ops)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for scale in (1.0, 4.0):
        feeds = _feeds(case, scale)
        (want,) = session.run(None, feeds)
        for _ in range(2):
            got = method.run(feeds)["y"]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])


def test_a_shape_specialization_keeps_the_pairs_the_method_fused():
    """A method whose static part holds Conv → (Conv + Relu, fused at load) and whose other input
    has a symbolic dim: each input shape gets a shape specialization, a copy of the method's
    steps fused again, where the Conv is followed by the fused pair (a step of two kernels, no
    epilogue op of its own): it stays as it is, and every run matches onnxruntime."""
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
        helper.make_node("Relu", ["z"], ["y2"]),
    ]
    inits = [
        ("w1", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        ("w2", rng.standard_normal((4, 4, 3, 3)).astype(np.float32)),
    ]
    data = model_bytes(
        nodes, [("x", F32, [1, 3, 8, 8]), ("z", F32, ["N", 2])], [("y", F32, None), ("y2", F32, None)], inits
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert any(isinstance(s, _PreparedStep) and isinstance(s.kernel, _KernelPair) for s in method._steps)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    for n in (1, 1, 3, 3):  # the second run at a shape runs its specialization
        feeds = {"x": x, "z": rng.standard_normal((n, 2)).astype(np.float32)}
        got = method.run(feeds)
        for name, want in zip(("y", "y2"), session.run(["y", "y2"], feeds)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-4)
    assert len(method._specializations.entries) == 2
