"""Kernels of TFLite's integer operators (domain ``offload.tflite``), as LiteRT's CPU computes them.

LiteRT's default CPU path hands most int8 operators to XNNPACK and runs the rest with TFLite's
builtin kernels; the two round differently, and a model's int8 outputs follow whichever ran.
Each kernel here names the arithmetic it reproduces (docs/tflite.md "Quantization"):

- XNNPACK's **fp32 requantization** (Conv, FullyConnected, Mul, Mean, Sum): an exact int32
  accumulator, times a float32 scale (``x_scale·w_scale / y_scale`` per output channel, each
  step rounded to float32), rounded to nearest even, plus the output zero point, clamped.
- XNNPACK's **fixed-point addition** (Add, Sub): each input times a multiplier of at most 21
  bits (its scale ratio times 2^shift, the shift putting the larger ratio in [2^20, 2^21)),
  summed with a bias that folds in the zero points and the rounding half, shifted right.
- TFLite's builtin **average pool**: the raw int8 window sum over the elements inside the
  input, divided by their count rounding half away from zero.
- **Lookup**: any unary operator on int8 is a table of 256 entries, built at import the way the
  kernel LiteRT runs computes each entry (frontends/tflite_int8.py).

The uint8 forms (legacy TF1 quantized models: uint8 activations, uint8 weights with a zero
point) are the same arithmetic on 0..255: the result has the input's type (int8 or uint8).

Accumulators are exact: 8-bit products summed in float64 (exact below 2^53) or int64.
"""

from __future__ import annotations

import numpy as np

from offload.ir.tflite_ops import DOMAIN

from . import fixed_point as fp
from . import kernel
from ._util import check_result
from .conv import _integer_conv
from .pool import _window_counts
from .windows import _fold_windows, _geometry


def _f32(v) -> np.ndarray:
    return np.asarray(v, np.float32)


def requantize_fp32(acc: np.ndarray, scale, zero_point: int, lo: int, hi: int, dtype=np.int8) -> np.ndarray:
    """XNNPACK's fp32 requantization of an exact integer accumulator (float64 or int64), as
    ``dtype`` (int8, or uint8)."""
    y = np.rint(acc.astype(np.float32) * _f32(scale))
    return np.clip(y + zero_point, lo, hi).astype(dtype)


def _channel_scale(x_scale, w_scales, y_scale) -> np.ndarray:
    return _f32(x_scale) * _f32(w_scales) / _f32(y_scale)


@kernel("Conv", domain=DOMAIN)
def conv(
    ctx,
    x,
    w,
    b=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    pads,
    strides,
    x_scale,
    x_zero_point,
    w_scales,
    w_zero_point=0,
    y_scale,
    y_zero_point,
    y_min,
    y_max,
):
    acc = _integer_conv(
        "offload.tflite::Conv",
        x,
        w,
        x_zero_point,
        w_zero_point or None,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    spatial = (1,) * (x.ndim - 2)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((-1, *spatial))
    scale = _channel_scale(x_scale, w_scales, y_scale).reshape((-1, *spatial))
    return requantize_fp32(acc, scale, y_zero_point, y_min, y_max, x.dtype)


@kernel("FullyConnected", domain=DOMAIN)
def fully_connected(
    ctx, x, w, b=None, *, x_scale, x_zero_point, w_scales, w_zero_point=0, y_scale, y_zero_point, y_min, y_max
):
    weights = w.astype(np.float64)
    if w_zero_point:
        weights = weights - w_zero_point
    acc = (x.astype(np.float64) - x_zero_point) @ weights.T
    if b is not None:
        acc = acc + b.astype(np.float64)
    scale = _channel_scale(x_scale, w_scales, y_scale)
    return requantize_fp32(acc, scale, y_zero_point, y_min, y_max, x.dtype)


def add_parameters(a_ratio: np.float32, b_ratio: np.float32) -> tuple[int, int, int]:
    """XNNPACK's (a multiplier, b multiplier, shift) for the scale ratios a_scale/y_scale and
    ±b_scale/y_scale: shift = 20 - the larger ratio's binary exponent (so that ratio becomes a
    multiplier in [2^20, 2^21)), each multiplier its ratio times 2^shift (exact in float32)
    rounded to nearest even."""
    largest = np.float32(max(abs(a_ratio), abs(b_ratio)))
    exponent = int(largest.view(np.uint32) >> 23) - 127
    shift = 20 - exponent
    a = int(np.rint(np.float32(a_ratio) * np.float32(2.0**shift)))
    b = int(np.rint(np.float32(b_ratio) * np.float32(2.0**shift)))
    return a, b, shift


def _add(a, b, sign, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max):
    a_mult, b_mult, shift = add_parameters(
        _f32(a_scale) / _f32(y_scale), sign * (_f32(b_scale) / _f32(y_scale))
    )
    bias = (1 << (shift - 1)) - a_mult * a_zero_point - b_mult * b_zero_point
    acc = bias + a.astype(np.int64) * a_mult + b.astype(np.int64) * b_mult
    return np.clip((acc >> shift) + y_zero_point, y_min, y_max).astype(a.dtype)


@kernel("Add", domain=DOMAIN)
def add(ctx, a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max):
    return _add(a, b, 1, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max)


@kernel("Sub", domain=DOMAIN)
def sub(ctx, a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max):
    return _add(a, b, -1, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max)


@kernel("Mul", domain=DOMAIN)
def mul(ctx, a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max):
    acc = (a.astype(np.int64) - a_zero_point) * (b.astype(np.int64) - b_zero_point)
    scale = _f32(a_scale) * _f32(b_scale) / _f32(y_scale)
    return requantize_fp32(acc, scale, y_zero_point, y_min, y_max, a.dtype)


def _reduce_axes(x, axes) -> tuple[int, ...]:
    return tuple(sorted({int(a) % x.ndim for a in np.asarray(axes).reshape(-1)}))


def reduce_sum(x, axes, keepdims, x_scale, x_zero_point, y_scale, y_zero_point, mean: bool):
    """XNNPACK's mean and sum: the exact sum of x - zero point, times input/output scale (over
    the element count for a mean, in float32), rounded to nearest even."""
    dims = _reduce_axes(x, axes)
    total = (x.astype(np.int64) - x_zero_point).sum(axis=dims, keepdims=bool(keepdims))
    scale = _f32(x_scale) / _f32(y_scale)
    if mean:
        scale = scale / np.float32(np.prod([x.shape[a] for a in dims], dtype=np.int64))
    info = np.iinfo(x.dtype)
    return requantize_fp32(total, scale, y_zero_point, info.min, info.max, x.dtype)


@kernel("Mean", domain=DOMAIN)
def mean(ctx, x, axes, *, keepdims, x_scale, x_zero_point, y_scale, y_zero_point, y_min, y_max):
    return reduce_sum(x, axes, keepdims, x_scale, x_zero_point, y_scale, y_zero_point, True)


@kernel("Sum", domain=DOMAIN)
def sum_(ctx, x, axes, *, keepdims, x_scale, x_zero_point, y_scale, y_zero_point, y_min, y_max):
    return reduce_sum(x, axes, keepdims, x_scale, x_zero_point, y_scale, y_zero_point, False)


@kernel("AveragePool", domain=DOMAIN)
def average_pool(ctx, x, *, auto_pad, kernel_shape, pads, strides, y_scale, y_zero_point, y_min, y_max):
    """TFLite's builtin int8 (and uint8) average pool: the window's raw sum over the elements
    inside the input, divided by their count, rounding half away from zero (input and output
    share a scale; a uint8 sum is never negative, so that is uint8's half up)."""
    g = _geometry("offload.tflite::AveragePool", x.shape, kernel_shape, auto_pad, None, pads, strides)
    sums = _fold_windows(x.astype(np.float64), g, np.add, 0).astype(np.int64)
    counts = _window_counts(g, x.shape[2:]).astype(np.int64)
    y = np.sign(sums) * ((np.abs(sums) + counts // 2) // counts)
    return np.clip(y, y_min, y_max).astype(x.dtype)


@kernel("Lookup", domain=DOMAIN)
def lookup(ctx, x, table, *, function, alpha, x_scale, x_zero_point, y_scale, y_zero_point, y_min, y_max):
    """``table[x + 128]``: a unary int8 operator as the 256 values it takes (``table[x]`` for
    uint8, whose table starts at input 0)."""
    return table[x.astype(np.int64) + (128 if x.dtype == np.int8 else 0)]


@kernel("Div", domain=DOMAIN)
def div(ctx, a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max):
    """TFLite's builtin int8 DIV: the numerator shifted to use all its headroom, times the
    divisor's fixed-point reciprocal, then the output multiplier a_scale/(b_scale·y_scale) with
    the total shift (past 31 bits as LiteRT's x86 build shifts: a numerator 1 unit from its zero
    point can come out saturated). A divisor at its zero point (a real 0) gives what LiteRT's
    arithmetic gives for it, not an error: TFLite checks it only in debug builds."""
    dtype = a.dtype
    a = a.astype(np.int64) - a_zero_point
    b = b.astype(np.int64) - b_zero_point
    a, b = np.broadcast_arrays(np.where(b < 0, -a, a), np.abs(b))
    inverse, over_unit = fp.reciprocal(b)
    headroom = fp.count_leading_sign_bits(a)
    quotient = fp.srdhm(a << headroom, inverse)
    mantissa, exponent = fp.quantize_multiplier(float(a_scale) / (float(b_scale) * float(y_scale)))
    total = exponent - over_unit - headroom
    y = fp.rounding_divide_by_pot_x86(fp.srdhm(quotient, mantissa), -total) + y_zero_point
    return np.clip(y, y_min, y_max).astype(dtype)


@kernel("SquaredDifference", domain=DOMAIN)
def squared_difference(
    ctx, a, b, *, a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point, y_min, y_max
):
    """TFLite's builtin int8 SQUARED_DIFFERENCE: both inputs shifted left by 7 and scaled to
    half the larger input scale, their difference squared, scaled to the output."""
    twice = 2.0 * max(float(a_scale), float(b_scale))
    out_real = twice * twice / ((1 << 14) * float(y_scale))
    scaled = [
        fp.multiply_by_quantized_multiplier(
            (x.astype(np.int64) - zero) << 7, *fp.quantize_multiplier(float(scale) / twice)
        )
        for x, scale, zero in ((a, a_scale, a_zero_point), (b, b_scale, b_zero_point))
    ]
    diff = scaled[0] - scaled[1]
    y = fp.multiply_by_quantized_multiplier(diff * diff, *fp.quantize_multiplier(out_real)) + y_zero_point
    return np.clip(y, y_min, y_max).astype(a.dtype)


def _bilinear_taps(size: int, out: int, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """XNNPACK's source rows (or columns) of a bilinear resize and their Q11 weights: the
    coordinate in float32 (``out·scale`` for align_corners and the asymmetric mode, else
    ``(out + ½)·scale - ½`` clamped to the input), truncated for the first tap, the fraction
    rounded to 11 bits."""
    adjust = 1 if mode == "align_corners" and out != 1 else 0
    scale = np.float32(size - adjust) / np.float32(out - adjust)
    at = np.arange(out, dtype=np.float32) * scale
    if mode == "half_pixel":
        at = np.clip(at + (np.float32(0.5) * scale - np.float32(0.5)), np.float32(0), np.float32(size - 1))
    first = at.astype(np.int64)
    second = np.minimum(first + 1, size - 1)
    weight = np.rint((at - first.astype(np.float32)) * np.float32(2048.0)).astype(np.int64)
    return first, second, weight


@kernel("ResizeBilinear", domain=DOMAIN)
def resize_bilinear(ctx, x, sizes, *, coordinate_transformation_mode, y_scale, y_zero_point, y_min, y_max):
    """XNNPACK's int8 bilinear resize of NHWC ``x`` to ``sizes`` (height, width): the rows mixed
    with Q11 weights, then the columns, rounded by adding 2^21 and shifting right by 22."""
    height, width = (int(s) for s in np.asarray(sizes).reshape(-1)[:2])
    # the work is in int64, 8 bytes an output element per intermediate: bounded like a result
    check_result((x.shape[0], height, width, x.shape[3]), np.int64, "offload.tflite::ResizeBilinear")
    top, bottom, wy = _bilinear_taps(x.shape[1], height, coordinate_transformation_mode)
    left, right, wx = _bilinear_taps(x.shape[2], width, coordinate_transformation_mode)
    info = np.iinfo(x.dtype)
    x = x.astype(np.int64)
    rows_top, rows_bottom = x[:, top], x[:, bottom]
    wx, wy = wx[None, None, :, None], wy[None, :, None, None]
    upper = (rows_top[:, :, left] << 11) + (rows_top[:, :, right] - rows_top[:, :, left]) * wx
    lower = (rows_bottom[:, :, left] << 11) + (rows_bottom[:, :, right] - rows_bottom[:, :, left]) * wx
    acc = (upper << 11) + (lower - upper) * wy
    return np.clip((acc + (1 << 21)) >> 22, info.min, info.max).astype(info.dtype)
