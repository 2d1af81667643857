"""QuantizeLinear's rounding (runtime/kernels/quantization.py): halves go to the even integer,
then saturate, as onnxruntime rounds them; per tensor and per axis, to uint8, int8 and int16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from tests.reference import onnxruntime_outputs

from .onnx_graphs import model_bytes

# x / scale lands on every half from -260.5 to 260.5 (ties both ways, and past the int8 and uint8
# ranges), and between them
X = (np.arange(-521, 522, dtype=np.float32) / 2).reshape(1, -1)


@pytest.mark.parametrize("dtype", [TensorProto.UINT8, TensorProto.INT8, TensorProto.INT16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_halves_round_to_even_as_onnxruntime(dtype, per_axis):
    zp_type = helper.tensor_dtype_to_np_dtype(dtype)
    scale = np.array([1.0, 0.5], np.float32) if per_axis else np.array(1.0, np.float32)
    zero = np.array([3, 0], zp_type) if per_axis else np.array(3, zp_type)
    x = np.concatenate([X, X * 0.5]) if per_axis else X
    attrs = {"axis": 0} if per_axis else {}
    data = model_bytes(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], **attrs)],
        [("x", TensorProto.FLOAT, list(x.shape))],
        [("y", dtype, list(x.shape))],
        [("s", scale), ("z", zero)],
    )
    want = onnxruntime_outputs(data, {"x": x})["y"]
    got = offload.evaluate(offload.load(data), {"x": x})["y"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    # and by numpy's round half to even, saturated
    info = np.iinfo(zp_type)
    q = np.rint(x.astype(np.float64) / (scale[:, None] if per_axis else scale)) + (
        zero[:, None] if per_axis else zero
    ).astype(np.float64)
    np.testing.assert_array_equal(got, np.clip(q, info.min, info.max).astype(zp_type))
