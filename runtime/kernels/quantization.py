"""Quantization kernels: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.

Scales and zero points apply per tensor (a scalar), per axis (a 1-D tensor along ``axis``) or
per block (same rank as the input, each entry covering ``block_size`` elements along ``axis``).
Narrow types (int4, uint4, int2, uint2, float8, float4, float6) are ml_dtypes arrays.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from offload.ir import DataType

from . import kernel, prepared
from ._util import compiled_loops, normalize_axis, unsupported
from .elementwise import _CLIP

_NARROW_INTS = {np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)}
# Float types with no infinity encoding: out-of-range values always saturate.
_ALWAYS_SATURATE = {
    np.dtype(t) for t in (ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)
}
_DIVISION_TYPES = {np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)}


def _is_integer(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.integer) or dtype in _NARROW_INTS


def _work_type(dtype: np.dtype) -> type:
    """The numpy type arithmetic runs in: float64 for double, else float32 (exact for narrower)."""
    return np.float64 if dtype == np.float64 else np.float32


def _expand(param: np.ndarray, x: np.ndarray, axis: int, block_size: int, op: str) -> np.ndarray:
    """A scale or zero point shaped to broadcast against ``x`` for its granularity."""
    if param.size == 1 and block_size == 0:
        return param.reshape(())
    ax = normalize_axis(axis, x.ndim, op)
    if block_size == 0:
        if param.ndim != 1 or param.shape[0] != x.shape[ax]:
            raise unsupported(op, f"a scale of shape {param.shape} for input {x.shape} on axis {axis}")
        shape = [1] * x.ndim
        shape[ax] = -1
        return param.reshape(shape)
    if block_size < 0 or param.ndim != x.ndim:
        raise unsupported(op, f"block_size {block_size} with a scale {param.shape} for input {x.shape}")
    n, blocks = x.shape[ax], param.shape[ax]
    others_match = all(p == d for i, (p, d) in enumerate(zip(param.shape, x.shape)) if i != ax)
    if not others_match or not (blocks - 1) * block_size < n <= blocks * block_size:
        raise unsupported(op, f"a scale {param.shape} for input {x.shape}, axis {axis}, block {block_size}")
    return np.take(np.repeat(param, block_size, axis=ax), np.arange(n), axis=ax)


def _quantized_type(output_dtype: int, zero_point) -> np.dtype:
    if output_dtype:
        dt = DataType(output_dtype).numpy
        if zero_point is not None and zero_point.dtype != dt:
            raise unsupported("QuantizeLinear", f"output_dtype {dt} with a {zero_point.dtype} zero point")
        return dt
    return zero_point.dtype if zero_point is not None else np.dtype(np.uint8)


def _saturate_int(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = ml_dtypes.iinfo(dtype)
    return np.clip(values, info.min, info.max).astype(dtype)


@kernel("QuantizeLinear")
def quantize_linear(
    ctx, x, y_scale, y_zero_point=None, *, axis, block_size, output_dtype, precision, saturate
):
    op = "QuantizeLinear"
    out = _quantized_type(output_dtype, y_zero_point)
    # The division runs in the precision given, or else in the scale's type.
    prec = DataType(precision).numpy if precision else y_scale.dtype
    if precision and prec not in _DIVISION_TYPES:
        raise unsupported(op, f"precision {DataType(precision).name}")
    if prec not in _DIVISION_TYPES:  # int32 or float8e8m0 scales divide in float32
        prec = np.dtype(np.float32)
    work = _work_type(prec)
    scale = _expand(y_scale, x, axis, block_size, op).astype(prec).astype(work)
    q = (x.astype(prec).astype(work) / scale).astype(prec).astype(work)
    zp = 0 if y_zero_point is None else _expand(y_zero_point, x, axis, block_size, op).astype(work)
    if _is_integer(out):
        return _saturate_int(np.rint(q) + zp, out)
    y = q + zp
    if saturate or out in _ALWAYS_SATURATE:
        limit = float(ml_dtypes.finfo(out).max)
        y = np.clip(y, -limit, limit)
    return y.astype(out)


@kernel("DequantizeLinear")
def dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis, block_size, output_dtype):
    op = "DequantizeLinear"
    out = DataType(output_dtype).numpy if output_dtype else x_scale.dtype
    work = _work_type(out)
    if _is_integer(x.dtype):  # subtract exactly in int64 before going to floats
        diff = x.astype(np.int64)
        if x_zero_point is not None:
            diff = diff - _expand(x_zero_point, x, axis, block_size, op).astype(np.int64)
        diff = diff.astype(work)
    else:
        diff = x.astype(work)
        if x_zero_point is not None:
            diff = diff - _expand(x_zero_point, x, axis, block_size, op).astype(work)
    scale = _expand(x_scale, x, axis, block_size, op).astype(work)
    return (diff * scale).astype(out)


@kernel("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, x):
    x = x.astype(np.float32, copy=False)
    loops = compiled_loops()
    if loops is not None and x.size and x.flags.c_contiguous:  # the same arithmetic, one call
        y, scale, zero = np.empty(x.shape, np.uint8), np.empty((), np.float32), np.empty((), np.uint8)
        loops.dynamic_quantize8(x, x.min(), x.max(), y, scale, zero)
        return y, scale, zero
    # The range always includes 0 so that 0 is exactly representable.
    lo = np.float32(min(0.0, x.min())) if x.size else np.float32(0)
    hi = np.float32(max(0.0, x.max())) if x.size else np.float32(0)
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:  # an all-zero input: every value quantizes to 0, with scale 1 as onnxruntime's
        return np.zeros(x.shape, np.uint8), np.array(1, np.float32), np.array(0, np.uint8)
    zero_point = _saturate_int(np.rint(-lo / scale), np.dtype(np.uint8))
    y = _saturate_int(np.rint(x / scale) + np.float32(zero_point), np.dtype(np.uint8))
    return y, np.array(scale, np.float32), np.array(zero_point, np.uint8)


# ---- prepared calls: per-tensor 8-bit quantization in float32 ---------------------------------

_EIGHT_BITS = (np.dtype(np.int8), np.dtype(np.uint8))
_F32 = np.dtype(np.float32)


def _per_tensor(attrs, inputs, x_types, out_types, output) -> bool:
    """x of ``x_types``, a 0-d float32 scale, a 0-d zero point of the output's (or x's) 8-bit
    type or none, the output of ``out_types`` and x's shape, no blocks."""
    if output is None or len(inputs) not in (2, 3) or any(s is None for s in inputs):
        return False
    (x_type, x_shape), (s_type, s_shape) = inputs[:2]
    zp = inputs[2] if len(inputs) == 3 else None
    eight = output[0] if output[0] in _EIGHT_BITS else x_type
    return (
        x_type in x_types
        and output[0] in out_types
        and tuple(output[1]) == tuple(x_shape)
        and s_type == _F32
        and tuple(s_shape) == ()
        and (zp is None or (zp[0] == eight and tuple(zp[1]) == ()))
        and not attrs.get("block_size")
    )


@prepared("QuantizeLinear")
def _quantize_prepared(attrs, inputs, output):
    if attrs.get("precision") or not _per_tensor(attrs, inputs, (_F32,), _EIGHT_BITS, output):
        return None
    if (
        len(inputs) == 2
        and output[0] != np.uint8
        and attrs.get("output_dtype") != DataType.from_numpy(output[0])
    ):
        return None  # no zero point: uint8, or the type output_dtype names (a zero of that type)
    return _QuantizeCall()


class _QuantizeCall:
    """The kernel's float32 arithmetic into ``out`` through one float32 buffer: x / scale,
    rounded half to even, plus the zero point, clipped to the type's range, converted. Each
    element is rounded alone by correctly rounded operations, so an x of any layout (Split's
    pieces) gives the kernel's bits (``any_layout``)."""

    __slots__ = ()
    any_layout = True

    def __call__(self, out, x, scale, zero_point=None):
        self.bind(out, x, scale, zero_point)()

    def bind(self, out, x, scale, zero_point=None):
        if x.dtype != _F32 or scale.dtype != _F32 or x.shape != out.shape:
            raise TypeError("not the declared types")
        info = np.iinfo(out.dtype)
        lo, hi = float(info.min), float(info.max)
        loops = compiled_loops()
        if loops is not None and x.flags.c_contiguous and out.flags.c_contiguous:  # one pass
            zero = np.zeros((), out.dtype) if zero_point is None else zero_point
            return functools.partial(loops.quantize8, x, scale, zero, _F32.type(lo), _F32.type(hi), out)
        temp = np.empty(out.shape, _F32)
        divide, rint, add, clip = np.divide, np.rint, np.add, _CLIP

        def run():
            divide(x, scale, temp)
            rint(temp, temp)
            if zero_point is not None:
                add(temp, zero_point, temp)
            clip(temp, lo, hi, out, casting="unsafe")  # clipped in float32, then converted

        return run


@prepared("DequantizeLinear")
def _dequantize_prepared(attrs, inputs, output):
    if attrs.get("output_dtype", 0) not in (0, DataType.FLOAT.value):
        return None
    if not _per_tensor(attrs, inputs, _EIGHT_BITS, (_F32,), output):
        return None
    return _DequantizeCall()


class _DequantizeCall:
    """The kernel's arithmetic into ``out``: x (8-bit, so exact in float32) minus the zero point,
    exact, times the scale, rounded once; x of any layout (``any_layout``)."""

    __slots__ = ()
    any_layout = True

    def __call__(self, out, x, scale, zero_point=None):
        self.bind(out, x, scale, zero_point)()

    def bind(self, out, x, scale, zero_point=None):
        if x.dtype not in _EIGHT_BITS or scale.dtype != _F32 or x.shape != out.shape:
            raise TypeError("not the declared types")
        loops = compiled_loops()
        if loops is not None and x.flags.c_contiguous and out.flags.c_contiguous:  # one pass
            zero = np.zeros((), x.dtype) if zero_point is None else zero_point
            return functools.partial(loops.dequantize8, x, scale, zero, out)
        copyto, subtract, multiply = np.copyto, np.subtract, np.multiply

        def run():
            copyto(out, x, casting="unsafe")
            if zero_point is not None:
                subtract(out, zero_point, out)
            multiply(out, scale, out)

        return run
