"""Quantized TFLite tensors as float IR ops: the import-time half of docs/tflite.md "Quantization".

Three cases, decided per operator by the tensors it reads and writes:

1. Constant weights and biases with scales (int8 filters, per channel or per tensor; int32
   biases) are dequantized once, at import: ``scale · (q - zero_point)`` in float32 becomes the
   constant the float rule reads, so every backend sees float weights.
2. A full-integer operator (its activations int8/uint8/int16 with scales) without an integer
   rule in tflite_int8.py (which computes int8 operators exactly as LiteRT does) reads each
   quantized activation through ``DequantizeLinear`` and writes each quantized output through
   ``QuantizeLinear`` with the output tensor's scale and zero point; in between runs the float
   rule. Exact for data movement and order-preserving operators (max pool, maximum, reduce max),
   within LiteRT's rounding for the others.
3. A hybrid operator (dynamic-range models: float activations, int8 weights, CONV_2D,
   DEPTHWISE_CONV_2D, FULLY_CONNECTED) is computed by LiteRT on its input quantized to int8 on
   the fly, per batch row. That quantization is reproduced with float ops before the float
   rule (``hybrid_input``) so the float outputs match LiteRT's and not the float model's.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, QuantParams

QUANTIZED_DTYPES = (DataType.INT8, DataType.UINT8, DataType.INT16, DataType.INT32)
ACTIVATION_DTYPES = (DataType.INT8, DataType.UINT8, DataType.INT16)
HYBRID_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
TINY = np.float32(np.finfo(np.float32).tiny)  # an all-zero row's range: its values stay 0


def _broadcast(param: np.ndarray, quant: QuantParams, rank: int) -> np.ndarray:
    if quant.axis is None or param.size == 1:
        return param.reshape(())
    shape = [1] * rank
    shape[quant.axis] = param.size
    return param.reshape(shape)


def dequantize_array(array: np.ndarray, quant: QuantParams) -> np.ndarray:
    """``scale · (q - zero_point)`` in float32, per tensor or along ``quant.axis``."""
    scale = _broadcast(quant.scale.astype(np.float32), quant, array.ndim)
    zero = _broadcast(quant.zero_point.astype(np.int64), quant, array.ndim)
    return ((array.astype(np.int64) - zero).astype(np.float32) * scale).astype(np.float32)


def quant_inputs(imp, quant: QuantParams, dtype: DataType) -> tuple[list, dict]:
    """The scale and zero-point constants and the axis attribute of a Quantize/DequantizeLinear."""
    per_axis = quant.axis is not None and quant.scale.size > 1
    scale = quant.scale.astype(np.float32)
    zero = quant.zero_point.astype(dtype.numpy)
    if not per_axis:
        scale, zero = scale.reshape(()), zero.reshape(())
    attrs = {"axis": int(quant.axis)} if per_axis else {}
    return [imp.const(scale), imp.const(zero)], attrs


def hybrid_input(node, x, axes: list[int], asymmetric: bool):
    """``x`` as LiteRT's hybrid kernels see it: quantized to int8 per batch row, then back.

    Asymmetric (tensor_utils::AsymmetricQuantizeFloats): the row's range [min(x, 0), max(x, 0)]
    spread over 255 steps, zero point round(-128 - min / scale), q = clamp(round(zp + x / scale)).
    Symmetric (SymmetricQuantizeFloats): q = clamp(round(x · 127 / max|x|), ±127), zero point 0.
    The kernel's integer accumulation of (q - zp)·w equals the float one on (q - zp)·scale.
    """
    reduce = {"keepdims": 1}
    axes_v = node.ints(axes)
    zero = node.scalar(0.0)
    if asymmetric:
        lo = node.one("Min", [node.one("ReduceMin", [x, axes_v], reduce), zero])
        hi = node.one("Max", [node.one("ReduceMax", [x, axes_v], reduce), zero])
        scale = node.one(
            "Max", [node.one("Div", [node.one("Sub", [hi, lo]), node.scalar(255.0)]), node.scalar(TINY)]
        )
        zp = node.one("Round", [node.one("Sub", [node.scalar(-128.0), node.one("Div", [lo, scale])])])
        inverse = node.one("Reciprocal", [scale])
        q = node.one("Round", [node.one("Add", [zp, node.one("Mul", [x, inverse])])])
        q = node.one("Clip", [q, node.scalar(-128.0), node.scalar(127.0)])
        return node.one("Mul", [node.one("Sub", [q, zp]), scale])
    top = node.one("Max", [node.one("ReduceMax", [node.one("Abs", [x]), axes_v], reduce), node.scalar(TINY)])
    q = node.one("Round", [node.one("Mul", [x, node.one("Div", [node.scalar(127.0), top])])])
    q = node.one("Clip", [q, node.scalar(-127.0), node.scalar(127.0)])
    return node.one("Mul", [q, node.one("Div", [top, node.scalar(127.0)])])
