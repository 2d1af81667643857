"""Float functions numpy computes slowly or not at all, each a compiled loop (runtime/kernels/loops.py)
with a numpy twin that computes the same bits where numba is missing or off: erf (float32 by a
rational function, float64 by the C library's or a series), exp and sigmoid of float32 (a
float32 exp of their own), exact GELU of float32 in one pass. Their constants are in
``_coefficients``."""

from __future__ import annotations

import math

import numpy as np

from ._coefficients import (
    ERF_P,
    ERF_Q,
    EXP_HI,
    EXP_LO,
    EXP_TAYLOR,
    F32,
    GELU_SCALE,
    LN2_HI,
    LN2_LO,
    LOG2E,
    TANH_P,
    TANH_SPLIT,
)
from ._util import compiled_loops

# ---------------------------------------------------------------- erf


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_ERF_SPLIT = 2.5  # below: the power series; above: the continued fraction of erfc
_ERF_TERMS = 45  # series terms; the last one is < 1e-19 of the sum at the split
_ERFC_DEPTH = 80  # continued-fraction depth; accurate to float64 rounding from the split on


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64, to within a few ulps, with numpy only.

    |x| < 2.5: erf(x) = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)), a series of
    positive terms (no cancellation). Beyond: Laplace's continued fraction
    erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), evaluated backwards.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(a)
    small = a < _ERF_SPLIT
    s = a[small]
    s2 = s * s
    term = s.copy()
    total = s.copy()
    for n in range(1, _ERF_TERMS):
        term *= 2.0 * s2 / (2 * n + 1)
        total += term
    out[small] = _TWO_OVER_SQRT_PI * np.exp(-s2) * total
    big = a[~small]
    with np.errstate(invalid="ignore", over="ignore"):
        f = big.copy()
        for k in range(_ERFC_DEPTH, 0, -1):
            f = big + (0.5 * k) / f
        out[~small] = 1.0 - np.exp(-big * big) / (math.sqrt(math.pi) * f)
    return np.copysign(out, x)


def _erf_rational(x: np.ndarray) -> np.ndarray:
    """``loops.erf32``'s arithmetic with numpy: the same operations in the same order."""
    v = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # |v| >= 4 is replaced below
        t = v * v
        p = np.full_like(t, ERF_P[6])
        for c in ERF_P[5::-1]:
            p = p * t + c
        q = np.full_like(t, ERF_Q[5])
        for c in ERF_Q[4::-1]:
            q = q * t + c
        r = v * p / q
    return np.where(np.abs(v) >= 4.0, np.copysign(1.0, v), r)


def _erf(x) -> np.ndarray:
    """erf in float64. Of float32 (and narrower) values: a rational function within 1.7e-8 of
    erf (``loops.erf32``, compiled where numba is there, else the same arithmetic in numpy),
    within an ulp of float32's correctly rounded erf; 4x the C library's speed. Of float64 values:
    the compiled loop (the C library's erf) where numba is there, else the numpy series of
    ``_erf64`` (about 30 times slower)."""
    x = np.asarray(x)
    loops = compiled_loops()
    if x.dtype.kind == "f" and x.dtype.itemsize <= 4:
        if loops is None:
            return _erf_rational(x)
        out = np.empty(x.shape, np.float64)
        loops.erf32(np.ascontiguousarray(x, dtype=np.float32), out)
        return out
    if loops is None or x.dtype.kind != "f":
        return _erf64(x)
    out = np.empty(x.shape, np.float64)
    loops.erf(np.ascontiguousarray(x), out)
    return out


# ---------------------------------------------------------------- exp, sigmoid, GELU


def _exp32(x: np.ndarray) -> np.ndarray:
    """``loops._exp32``'s arithmetic with numpy on float32 values: the same operations in the same
    order, so the same bits (``_coefficients``: clamp, two-part ln 2, Taylor polynomial, 2^n from
    exponent bits)."""
    y = np.minimum(np.maximum(x, EXP_LO), EXP_HI)
    n = np.floor(y * LOG2E + F32(0.5))
    r = y - n * LN2_HI - n * LN2_LO
    p = np.full_like(r, EXP_TAYLOR[7])
    for c in EXP_TAYLOR[6::-1]:
        p = p * r + c
    k = n.astype(np.int32)
    h = k >> 1
    return p * ((h + 127) << 23).view(np.float32) * ((k - h + 127) << 23).view(np.float32)


def memory_order(a: np.ndarray) -> np.ndarray | None:
    """``a`` with its axes in the order of its memory, where that view is C-contiguous (a
    transposed view of a whole array, a result numpy allocated in its operands' layout), else None."""
    order = sorted(range(a.ndim), key=lambda k: -abs(a.strides[k]))
    view = a.transpose(order)
    return view if view.flags.c_contiguous else None


def exp32_into(out: np.ndarray, x: np.ndarray) -> None:
    """exp of float32 ``x`` into ``out`` (of x's shape, may be x): ``loops.exp32`` where numba is
    there, else the same arithmetic with numpy (the same bits): ``_exp32``, 0 below exp's float32
    range and inf above it, NaN kept; within one ulp of the correctly rounded exp. 0.9 ns an
    element against 2.5-2.9 for numpy's float32 exp on the AMD EPYC test machine."""
    loops = compiled_loops()
    if loops is not None:
        if x.flags.c_contiguous and out.flags.c_contiguous:
            loops.exp32(x, out)
        elif x is out and (dense := memory_order(x)) is not None:
            loops.exp32(dense, dense)  # in place, element by element: any order of the same memory
        else:  # the loop reads and writes C-contiguous arrays: another layout through a copy
            e = np.ascontiguousarray(x)
            loops.exp32(e, e)
            np.copyto(out, e)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        e = _exp32(x)
    e = np.where(x < EXP_LO, F32(0.0), e)
    e = np.where(x > EXP_HI, F32(np.inf), e)
    np.copyto(out, np.where(np.isnan(x), x, e))


def _sigmoid32(out: np.ndarray, x: np.ndarray) -> None:
    """Sigmoid of float32 ``x`` into ``out`` (C-contiguous, may be x): ``loops.sigmoid32`` where
    numba is there, else the same arithmetic with numpy (the same bits): 1 / (1 + exp(-x)) by
    ``_exp32``, 0 where -x is past exp's float32 range, NaN kept. 1.2 ns an element against 3.3
    for numpy's four passes (its float32 exp alone 2.5-2.9 on the AMD EPYC test machine)."""
    loops = compiled_loops()
    if loops is not None:
        loops.sigmoid32(x, out)
        return
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.divide(F32(1.0), F32(1.0) + _exp32(-x))
    s = np.where(-x > EXP_HI, F32(0.0), s)
    np.copyto(out, np.where(np.isnan(x), x, s))


def _tanh32(out: np.ndarray, x: np.ndarray) -> None:
    """tanh of float32 ``x`` into ``out`` (C-contiguous, may be x): ``loops.tanh32`` where numba
    is there, else the same arithmetic with numpy (the same bits): x + x · z · P(z) below
    ``TANH_SPLIT`` in magnitude, else 1 − 2 / (exp(2|x|) + 1) by ``_exp32`` with x's sign; x itself
    where x² underflows to 0 (±0 kept) and NaN; within 2 ulps of tanh. 0.9 ns an element against 3.7 for numpy's float32 tanh on the
    AMD EPYC test machine."""
    loops = compiled_loops()
    if loops is not None:
        loops.tanh32(x, out)
        return
    a = np.abs(x)
    z = x * x
    p = np.full_like(z, TANH_P[4])
    for c in TANH_P[3::-1]:
        p = p * z + c
    with np.errstate(over="ignore", invalid="ignore"):  # inf's polynomial: not chosen
        small = p * z * x + x
        large = F32(1.0) - F32(2.0) / (_exp32(a + a) + F32(1.0))
    large = np.where(x < 0, -large, large)
    r = np.where(a < TANH_SPLIT, small, large)
    np.copyto(out, np.where(np.isnan(x) | (z == 0), x, r))


def _gelu_exact(x):
    """GELU with erf. Of float32 (and narrower) values in float64, rounded once: the argument
    ``x · loops.GELU_SCALE`` and ``loops.erf32``'s rational function, one compiled pass
    (``loops.gelu32``) where numba is there, else the same operations with numpy (the same bits)."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize > 4:
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    loops = compiled_loops()
    if loops is not None:
        out = np.empty(x.shape, np.float32)
        loops.gelu32(np.ascontiguousarray(x, dtype=np.float32), out)
        return out
    v = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf · (1 - 1): NaN, as the unfused ops give
        return (0.5 * v * (1.0 + _erf_rational(v * GELU_SCALE))).astype(np.float32)
