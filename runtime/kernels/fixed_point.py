"""TFLite's fixed-point arithmetic, vectorized on int64 numpy arrays (gemmlowp's published rules).

A real multiplier m > 0 is stored as an int32 Q31 mantissa and a power-of-two exponent
(``quantize_multiplier``): m = mantissa · 2^(exponent - 31). Products are taken by
``srdhm`` (SaturatingRoundingDoublingHighMul: the high 32 bits of 2ab, rounded to nearest with
ties upward) and shifts right by ``rounding_divide_by_pot`` (rounded half away from zero). The int16
variants are the same rules on 16-bit words. Used at import to build the tables of unary int8
operators (frontends/tflite_int8.py) exactly as LiteRT's builtin kernels compute them.
"""

from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(Q31 mantissa, exponent) of ``real``: frexp, the mantissa times 2^31 rounded half away
    from zero (2^31 itself becomes 2^30 with the exponent one higher)."""
    if real == 0.0:
        return 0, 0
    q, exponent = math.frexp(real)
    mantissa = math.floor(abs(q) * 2.0**31 + 0.5) * (1 if q > 0 else -1)
    if mantissa == 2**31:
        mantissa //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return mantissa, exponent


def _truncating_shift(x: np.ndarray, bits: int) -> np.ndarray:
    """x / 2^bits rounded toward zero (C's integer division)."""
    return np.where(x >= 0, x >> bits, -((-x) >> bits))


def srdhm(a, b, bits: int = 32) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul on ``bits``-bit words (32 or 16)."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    low = -(2 ** (bits - 1))
    ab = a * b
    nudge = np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2)))
    out = _truncating_shift(ab + nudge, bits - 1)
    return np.where((a == low) & (b == low), 2 ** (bits - 1) - 1, out)


def rounding_divide_by_pot(x, exponent: int) -> np.ndarray:
    """x / 2^exponent rounded to nearest, half away from zero (gemmlowp RoundingDivideByPOT)."""
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, mantissa: int, exponent: int) -> np.ndarray:
    """x · mantissa · 2^(exponent - 31), TFLite's MultiplyByQuantizedMultiplier."""
    left, right = max(exponent, 0), max(-exponent, 0)
    return rounding_divide_by_pot(srdhm(np.asarray(x, np.int64) * (1 << left), mantissa), right)


def to_int16_multiplier(mantissa: int) -> int:
    """A Q31 mantissa rounded to Q15 (DownScaleInt32ToInt16Multiplier)."""
    if mantissa >= INT32_MAX - (1 << 15):
        return INT16_MAX
    return (mantissa + (1 << 15)) >> 16


def saturate16(x) -> np.ndarray:
    return np.clip(x, INT16_MIN, INT16_MAX)


def _clz32(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of non-negative values below 2^32, as 32-bit words."""
    x = np.asarray(x, np.int64)
    bits = np.frexp(x.astype(np.float64))[1]  # bit length; exact below 2^53
    return np.where(x == 0, 32, 32 - bits)


def count_leading_sign_bits(x: np.ndarray) -> np.ndarray:
    """Redundant sign bits of int32 values (GCC's __builtin_clrsb; 31 for 0 and -1)."""
    x = np.asarray(x, np.int64)
    return np.where(x >= 0, _clz32(x) - 1, np.where(x != INT32_MIN, _clz32(2 * np.abs(x) - 1), 0))


def _saturating_shift_left(x: np.ndarray, exponent: int) -> np.ndarray:
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, INT32_MAX, np.where(x < -threshold, INT32_MIN, x * (1 << exponent)))


def _rounding_half_sum(a: np.ndarray, b) -> np.ndarray:
    total = a + b
    return _truncating_shift(total + np.where(total >= 0, 1, -1), 1)


def reciprocal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TFLite's GetReciprocal(x, 31) of positive int32 ``x``: (Q31 mantissa of 1/(1 + f), bits
    over unit) where x = (1 + f)·2^bits, by gemmlowp's three Newton steps from 48/17 - 32/17·d."""
    x = np.asarray(x, np.int64)
    lead = _clz32(x)
    over_unit = 31 - lead
    f = ((x << lead) & 0xFFFFFFFF) - (1 << 31)
    half = _rounding_half_sum(f, INT32_MAX)  # (1 + f)/2 in Q0.31
    y = 1515870810 + srdhm(half, -1010580540)  # Q2.29: 48/17 - 32/17·half
    for _ in range(3):
        one_minus = (1 << 29) - srdhm(half, y)
        y = y + _saturating_shift_left(srdhm(y, one_minus), 2)
    return _saturating_shift_left(y, 1), over_unit


def rounding_divide_by_pot_x86(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """RoundingDivideByPOT with per-element exponents as LiteRT's x86 build computes it, also
    for exponents past 31 (which C leaves undefined): the mask (2^e - 1) keeps its low 32 bits
    and the shift count is taken modulo 32, as the x86 shift instructions do."""
    x, exponent = np.asarray(x, np.int64), np.asarray(exponent, np.int64)
    mask = ((np.int64(1) << np.minimum(exponent, 62)) - 1) & 0xFFFFFFFF
    mask = np.where(mask >= 2**31, mask - 2**32, mask)  # as int32
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> (exponent & 31)) + (remainder > threshold)
