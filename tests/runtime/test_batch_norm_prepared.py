"""Inference BatchNormalization as a prepared call of the CPU executor (runtime/kernels/
normalization.py, ``_BatchNormCall``), alone and with the Relu or Clip that alone reads it applied
per chunk of channels (runtime/fusions.py, ``_fuse_epilogues``): against onnxruntime, bit for bit
against offload.evaluate (the ops run apart by their kernels), with its parameters constants or
computed by the graph, written over its input or not, and the cases the kernel keeps."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.normalization import _BatchNormCall
from offload.runtime.steps import _FusedAway, _KernelPair, _PreparedStep

from .onnx_graphs import model_bytes

# (input shape, dtype): 200 channels of 32 x 32 float32 take four chunks of channels
SHAPES = [
    ((1, 200, 32, 32), np.float32),
    ((2, 24, 9, 7), np.float32),
    ((1, 16, 5, 6), np.float64),
    ((3, 10), np.float32),
]
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(shape, dtype, after: str | None, first: str = "Neg", params_in: bool = False) -> bytes:
    """x -> first -> BatchNormalization -> [after] -> y. ``first`` Conv (1 x 1) makes the
    normalization's input an arena value it may write over, Softsign a kernel's result (the call
    runs unbound, keeping its calls for the arrays it got last); ``params_in``: the scale is the
    graph's input ``s`` times 1, a value the graph computes, not a constant."""
    c = shape[1]
    rng = np.random.default_rng(sum(shape))
    t = TYPES[dtype]
    inits = [
        ("scale", rng.uniform(0.5, 1.5, c).astype(dtype)),
        ("bias", rng.standard_normal(c).astype(dtype)),
        ("mean", rng.standard_normal(c).astype(dtype)),
        ("var", rng.uniform(0.1, 2.0, c).astype(dtype)),
    ]
    inputs = [("x", t, list(shape))]
    nodes = []
    if first == "Conv":
        inits.append(("w", (rng.standard_normal((c, c, 1, 1)) * 0.3).astype(dtype)))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["r"]))
    elif first == "Softsign":  # a kernel's result (no prepared call): the normalization runs unbound
        nodes.append(helper.make_node("Softsign", ["x"], ["r"]))
    else:
        nodes.append(helper.make_node("Neg", ["x"], ["r"]))
    scale = "scale"
    if params_in:
        inputs.append(("s", t, [c]))
        nodes.append(helper.make_node("Mul", ["s", "scale"], ["scaled"]))
        scale = "scaled"
    out = "y" if after is None else "n"
    nodes.append(
        helper.make_node("BatchNormalization", ["r", scale, "bias", "mean", "var"], [out], epsilon=1e-3)
    )
    if after == "Clip":
        inits += [("lo", np.array(0, dtype)), ("hi", np.array(2, dtype))]
        nodes.append(helper.make_node("Clip", ["n", "lo", "hi"], ["y"]))
    elif after is not None:
        nodes.append(helper.make_node(after, ["n"], ["y"]))
    return model_bytes(nodes, inputs, [("y", t, None)], inits, opset=17)


def _norm_steps(method) -> list:
    return [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _BatchNormCall)]


def _check(data, feeds_list, dtype) -> object:
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    tol = 1e-4 if dtype == np.float32 else 1e-10  # the 1 x 1 Conv's sums of 200 products
    for feeds in feeds_list:
        for _ in range(2):  # the second run reuses the bound calls
            got = method.run(feeds)["y"]
            want = offload.evaluate(program, feeds)["y"]
            assert np.array_equal(got, want)
            (reference,) = session.run(None, feeds)
            np.testing.assert_allclose(got, reference, rtol=tol, atol=tol)
    return method


def _feeds(shape, dtype, seed: int, params_in: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(shape).astype(dtype)}
    if params_in:
        feeds["s"] = rng.uniform(0.5, 2.0, shape[1]).astype(dtype)
    return feeds


# (shape, dtype, first): a 1 x 1 Conv before it on float32 images (onnxruntime has no float64
# Conv), a value the normalization may write over
CASES = [
    (s, d, f) for s, d in SHAPES for f in (["Neg", "Conv"] if len(s) == 4 and d == np.float32 else ["Neg"])
]


@pytest.mark.parametrize("after", [None, "Relu", "Clip"])
@pytest.mark.parametrize("shape,dtype,first", CASES, ids=[f"{s}-{f}" for s, _, f in CASES])
def test_batch_normalization_runs_prepared_and_matches(shape, dtype, first, after):
    method = _check(
        _model(shape, dtype, after, first), [_feeds(shape, dtype, 1), _feeds(shape, dtype, 2)], dtype
    )
    (step,) = _norm_steps(method)
    if after is None:
        assert step.call.epilogue is None
    else:  # the activation runs in the normalization's call; its own step runs nothing
        assert step.call.epilogue.op == after and isinstance(step.kernel, _KernelPair)
        assert sum(isinstance(s, _FusedAway) for s in method._steps) == 1


def test_written_over_its_input_chunk_by_chunk():
    shape, dtype = (1, 200, 32, 32), np.float32
    data = _model(shape, dtype, "Relu", "Conv")
    method = _check(data, [_feeds(shape, dtype, 8)], dtype)
    (step,) = _norm_steps(method)
    # the memory plan puts its output where the Conv's result is; each chunk of channels reads
    # its part of the input before writing it
    assert np.may_share_memory(method._planned[step.out_slot], method._planned[step.in_slots[0]])


def test_unbound_after_a_kernel_result():
    shape, dtype = (2, 24, 9, 7), np.float32
    feeds = [_feeds(shape, dtype, seed) for seed in (9, 10)]
    method = _check(_model(shape, dtype, "Clip", "Softsign"), feeds, dtype)
    (step,) = _norm_steps(method)
    assert not any(step in getattr(s, "steps", ()) for s in method._fast_steps)  # not bound
    assert step.call.last is not None  # the calls it made, kept


def test_parameters_the_graph_computes_are_read_again_at_each_run():
    shape, dtype = (1, 200, 32, 32), np.float32
    feeds = [_feeds(shape, dtype, seed, params_in=True) for seed in (3, 4, 5)]
    method = _check(_model(shape, dtype, "Relu", params_in=True), feeds, dtype)
    assert len(_norm_steps(method)) == 1


def test_training_mode_and_mixed_types_stay_with_the_kernel():
    c = 8
    x = np.random.default_rng(6).standard_normal((2, c, 4, 4)).astype(np.float32)
    # training mode: the batch's statistics (scale 1, bias 0)
    inits = [(n, np.full(c, v, np.float32)) for n, v in (("scale", 1), ("bias", 0), ("mean", 0), ("var", 1))]
    node = helper.make_node(
        "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], training_mode=1, epsilon=1e-5
    )
    data = model_bytes(
        [node], [("x", TensorProto.FLOAT, [2, c, 4, 4])], [("y", TensorProto.FLOAT, None)], inits, opset=15
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    assert not _norm_steps(method)
    got = method.run({"x": x})["y"]
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-5)
    # float64 parameters for a float32 input: the kernel computes in float64
    inits = [(n, np.full(c, 0.5, np.float64)) for n in ("scale", "bias", "mean", "var")]
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])
    data = model_bytes(
        [node], [("x", TensorProto.FLOAT, [2, c, 4, 4])], [("y", TensorProto.FLOAT, None)], inits, opset=15
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _norm_steps(method)
    np.testing.assert_allclose(
        method.run({"x": x})["y"], (x - 0.5) / np.sqrt(0.5 + 1e-5) * 0.5 + 0.5, rtol=1e-6, atol=1e-6
    )
