"""The 256-entry tables of TFLite's unary int8 (and uint8) operators, as LiteRT's CPU kernels compute them.

Every unary operator on int8 is a function of 256 inputs; ``offload.tflite::Lookup`` runs it as
a table built here once, at import, by the arithmetic of the kernel LiteRT runs for it:

- ``float_table``: XNNPACK's lookup tables (TANH, LOGISTIC; also TFLite's builtin EXP): the
  input dequantized in float32, the function taken, divided by the output scale, rounded to
  nearest even, plus the output zero point, clamped.
- ``leaky_relu_table``: XNNPACK's leaky ReLU and int8 → int8 QUANTIZE: the input minus its zero
  point times round(256 · ratio) (ratio = the scale ratio, times alpha on the negative side),
  shifted right by 8 after adding 128.
- ``hard_swish_table``: TFLite's builtin HARD_SWISH (LiteRT's XNNPACK leaves int8 HARD_SWISH to
  it): 16-bit fixed point, the input on a 2^-7 finer scale, a "reluish" factor
  relu6(x + 3)/6 on the scale 3/2^15, their product shifted to the output scale.
- ``requantize_table``: TFLite's builtin RELU / RELU6 / ABS and int8 requantization:
  (x - zero point) times the quantized multiplier of input/output scale, plus the output zero
  point, clamped to the activation's range.
"""

from __future__ import annotations

import numpy as np

from offload.runtime.kernels.fixed_point import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturate16,
    srdhm,
    to_int16_multiplier,
)

INPUTS = np.arange(-128, 128, dtype=np.int64)  # table entry k is the value for input k - 128


def _inputs(dtype) -> np.ndarray:
    """The 256 inputs in table order: -128..127 for int8 (entry k is input k - 128), 0..255 for
    uint8 (entry k is input k)."""
    return INPUTS if np.dtype(dtype) == np.int8 else np.arange(256, dtype=np.int64)


def _int8(values, dtype=np.int8) -> np.ndarray:
    """``values`` saturated to ``dtype`` (int8 or uint8)."""
    info = np.iinfo(dtype)
    return np.clip(values, info.min, info.max).astype(dtype)


def float_table(fn, x_scale: float, x_zero: int, y_scale: float, y_zero: int, dtype=np.int8) -> np.ndarray:
    x = np.float32(x_scale) * (_inputs(dtype) - x_zero).astype(np.float32)
    y = fn(x).astype(np.float32)
    return _int8(np.rint(y / np.float32(y_scale)) + y_zero, dtype)


def leaky_relu_table(
    alpha: float, x_scale: float, x_zero: int, y_scale: float, y_zero: int, dtype=np.int8
) -> np.ndarray:
    ratio = np.float32(x_scale) / np.float32(y_scale)
    positive = int(np.rint(np.float32(256.0) * ratio))
    negative = int(np.rint(np.float32(256.0) * (np.float32(alpha) * ratio)))
    x = _inputs(dtype) - x_zero
    return _int8(((x * np.where(x >= 0, positive, negative) + 128) >> 8) + y_zero, dtype)


def hard_swish_table(x_scale: float, x_zero: int, y_scale: float, y_zero: int, dtype=np.int8) -> np.ndarray:
    hires = np.float32(1.0 / 128.0) * np.float32(x_scale)
    out_mantissa, out_exponent = quantize_multiplier(float(hires / np.float32(y_scale)))
    relu_mantissa, relu_exponent = quantize_multiplier(float(hires / np.float32(3.0 / 32768.0)))
    out_multiplier, relu_multiplier = to_int16_multiplier(out_mantissa), to_int16_multiplier(relu_mantissa)
    x = saturate16((_inputs(dtype) - x_zero) * 128)
    preshift = srdhm(x, out_multiplier, 16)
    reluish = x
    if relu_exponent > 0:
        reluish = saturate16(reluish * (1 << (relu_exponent - 1)))
    reluish = srdhm(reluish, relu_multiplier, 16)
    if relu_exponent > 0:
        reluish = saturate16(reluish * 2)
    if relu_exponent < 0:
        reluish = rounding_divide_by_pot(reluish, -relu_exponent)
    reluish = (reluish + (1 << 15)) >> 1
    product = reluish * preshift
    product = np.where(product >= 0, product >> 15, -((-product) >> 15))  # truncating, not rounding
    return _int8(rounding_divide_by_pot(product, -out_exponent) + y_zero, dtype)


def requantize_table(
    x_scale: float,
    x_zero: int,
    y_scale: float,
    y_zero: int,
    lo: int = -128,
    hi: int = 127,
    absolute=False,
    dtype=np.int8,
) -> np.ndarray:
    mantissa, exponent = quantize_multiplier(float(np.float32(x_scale) / np.float32(y_scale)))
    x = _inputs(dtype) - x_zero
    if absolute:
        x = np.abs(x)
    y = multiply_by_quantized_multiplier(x, mantissa, exponent) + y_zero
    return _int8(np.clip(y, lo, hi), dtype)
