"""Inference rules of QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear."""

from __future__ import annotations

from .infer_dims import _attr_dtype, _dtype, _shape, _tensor, _tt
from .registry import inference
from .types import DataType, TensorType


@inference("QuantizeLinear")
def _quantize(op, attrs):
    zero_point = _dtype(op, 2)
    dtype = _attr_dtype(attrs.get("output_dtype"), zero_point or DataType.UINT8)
    return [_tt(dtype, _shape(op, 0)) if _tensor(op, 0) else None]


@inference("DequantizeLinear")
def _dequantize(op, attrs):
    dtype = _attr_dtype(attrs.get("output_dtype"), _dtype(op, 1))
    return [_tt(dtype, _shape(op, 0)) if _tensor(op, 0) else None]


@inference("DynamicQuantizeLinear")
def _dynamic_quantize(op, attrs):
    y = _tt(DataType.UINT8, _shape(op, 0)) if _tensor(op, 0) else None
    return [y, TensorType(DataType.FLOAT, ()), TensorType(DataType.UINT8, ())]
