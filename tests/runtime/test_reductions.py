"""ReduceSum and ReduceMean over trailing axes as products with ones (runtime/kernels/reduction.py
``_trailing_rows``): the sums against float64 numpy and onnxruntime, through a .pte and through
``offload.evaluate``, on the shapes that take the product and on those that keep np.sum."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload

from .onnx_graphs import model_bytes

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE

# (input shape, axes, keepdims): trailing axes of 7 x 7 (ShuffleNet's mean), one long axis,
# the product's limit and one past it (np.sum), a single row (np.sum), middle axes (np.sum).
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
def test_trailing_reductions_match_numpy_and_onnxruntime(op, elem, shape, axes, keepdims):
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
