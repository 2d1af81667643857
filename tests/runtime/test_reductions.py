"""ReduceSum, ReduceMean and GlobalAveragePool against float64 numpy and onnxruntime, through a
.pte and through ``offload.evaluate`` (the same bits); equal channels pool to equal values.

Their sums stay numpy's pairwise sums, the same loop for every row: a BLAS product with ones
(8 against 59 µs on ShuffleNet's 1024 x 7 x 7 mean) or one einsum (13 against 24 µs on
MobileNetV3's 576 x 7 x 7) rounds rows differently, and SqueezeNet's light model, whose 1,000
logits of about 6.8e9 are equal only as numpy's pairwise sum rounds them, then no longer has
ONNX's uniform softmax (2026-11-26)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload

from .onnx_graphs import model_bytes

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE

# (input shape, axes, keepdims): trailing axes of 7 x 7 (ShuffleNet's mean), of 14 x 14, long
# rows, a single row, middle axes.
CASES = [
    ([1, 1024, 7, 7], [2, 3], 0),
    ([2, 576, 14, 14], [-2, -1], 1),
    ([3, 5, 4096], [2], 1),
    ([3, 5, 4097], [2], 0),
    ([1, 1, 300], [2], 1),
    ([4, 6, 8, 3], [1, 2], 1),
]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape,axes,keepdims", CASES, ids=[f"{s}-{a}-{k}" for s, a, k in CASES])
def test_reductions_match_numpy_and_onnxruntime(op, elem, shape, axes, keepdims):
    # Abs first: the reduction's input is a planned, C-contiguous value, as inside a model.
    axes_input = np.array(axes, np.int64)
    data = model_bytes(
        [
            helper.make_node("Abs", ["x"], ["a"]),
            helper.make_node(op, ["a", "axes"], ["y"], keepdims=keepdims),
        ],
        [("x", elem, shape)],
        [("y", elem, None)],
        [("axes", axes_input)],
        opset=18,
    )
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = np.random.default_rng(len(shape) * 10 + shape[-1]).standard_normal(shape).astype(dtype)
    exact = np.abs(x).astype(np.float64)
    exact = exact.sum(axis=tuple(axes), keepdims=bool(keepdims))
    if op == "ReduceMean":
        exact /= np.prod([shape[a] for a in axes])
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    tol = 2e-6 if dtype == np.float32 else 1e-13
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    got = method.run({"x": x})["y"]
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, exact, rtol=tol, atol=0)
    np.testing.assert_allclose(got, want, rtol=2 * tol, atol=0)
    (evaluated,) = offload.evaluate(program, {"x": x}).values()
    np.testing.assert_array_equal(evaluated, got)  # one kernel: the same bits


# MobileNetV3's squeeze-excite maps, a batch, a 1-D map, and 70 x 70
GLOBAL = [[1, 576, 7, 7], [2, 16, 56, 56], [3, 10, 300], [1, 4, 70, 70]]


@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape", GLOBAL, ids=lambda s: "x".join(map(str, s)))
def test_global_average_pool_matches_numpy_and_onnxruntime(elem, shape):
    data = model_bytes(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("GlobalAveragePool", ["a"], ["y"])],
        [("x", elem, shape)],
        [("y", elem, None)],
    )
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = np.random.default_rng(shape[-1]).standard_normal(shape).astype(dtype)
    axes = tuple(range(2, len(shape)))
    exact = np.abs(x).astype(np.float64).mean(axis=axes, keepdims=True)
    want = None
    if dtype == np.float32:  # onnxruntime's CPU provider has no float64 GlobalAveragePool
        (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    tol = 2e-6 if dtype == np.float32 else 1e-13
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    for _ in range(2):  # the second run calls the bound passes
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, exact, rtol=tol, atol=0)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=2 * tol, atol=0)
    (evaluated,) = offload.evaluate(program, {"x": x}).values()
    np.testing.assert_array_equal(evaluated, got)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "ReduceMean"])
def test_equal_channels_pool_to_equal_values(op):
    # SqueezeNet with ONNX's constant light weights: 1,000 equal channels of about 1e9 whose
    # softmax is uniform only if every channel's sum rounds alike (ulps of 512 at 6.8e9).
    plane = np.linspace(1.8e9, 9.0e9, 13 * 13, dtype=np.float32).reshape(13, 13)
    x = np.broadcast_to(plane, (1, 1000, 13, 13)).copy()
    pool = (
        helper.make_node("GlobalAveragePool", ["a"], ["g"])
        if op == "GlobalAveragePool"
        else helper.make_node("ReduceMean", ["a", "axes"], ["g"], keepdims=1)
    )
    data = model_bytes(
        [helper.make_node("Relu", ["x"], ["a"]), pool, helper.make_node("Softmax", ["g"], ["y"], axis=1)],
        [("x", F32, [1, 1000, 13, 13])],
        [("y", F32, None)],
        [("axes", np.array([2, 3], np.int64))],
    )
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(want, 1e-3, rtol=1e-6)
    got = offload.runtime.load(offload.save(offload.load(data))).method("forward").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceLogSumExp", "ReduceProd"])
def test_a_reduction_of_a_transposed_value_sums_in_the_executors_order(op):
    """Transpose -> Sub -> Pow -> Reduce over the last axis (a LayerNorm's variance written out):
    offload.evaluate's Sub of the Transpose's view keeps the view's memory order, the CPU
    executor's arena holds it in C order, and numpy sums in memory order; the kernels sum the
    C-ordered values, so the .pte's bound run and evaluate agree bit for bit."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Sub", ["t", "c"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["p"]),
        helper.make_node(op, ["p", "axes"], ["y"], keepdims=1),
    ]
    scale = 0.05 if op == "ReduceProd" else 1.0  # products of 120 values near 1
    inits = [
        ("c", rng.standard_normal((1, 1, 120)).astype(np.float32)),
        ("two", np.array(2, np.float32)),
        ("axes", np.array([-1], np.int64)),
    ]
    data = model_bytes(nodes, [("x", F32, [1, 120, 40])], [("y", F32, None)], inits, opset=18)
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = (1.0 + scale * rng.standard_normal((1, 120, 40))).astype(np.float32)
    (want,) = session.run(None, {"x": x})
    expected = offload.evaluate(program, {"x": x})["y"]
    for _ in range(3):  # unbound, then bound
        got = module.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5)
        np.testing.assert_array_equal(got, expected)
