"""Reduction kernels: the Reduce* family, ArgMax/ArgMin, CumSum/CumProd and TopK."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from . import kernel
from ._util import normalize_axes, normalize_axis, unsupported


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """The type to compute in: float32 for the 16-bit floats (their sums lose too much), else the same."""
    if dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        return np.dtype(np.float32)
    return dtype


def _axes(data: np.ndarray, axes, noop_with_empty_axes: int, op: str) -> tuple[int, ...]:
    """The axes to reduce: all of them when none are given, none when the op is then a no-op."""
    if axes is None or np.asarray(axes).size == 0:
        return () if noop_with_empty_axes else tuple(range(data.ndim))
    return tuple(sorted(set(normalize_axes(axes, data.ndim, op))))


def _reduction(op: str, reduce):
    """A Reduce* kernel from ``reduce(x, axes)``, which gets the input in its work type and keeps dims.

    Reducing over no axes leaves the values where they are, so the elementwise steps of the
    composite reductions (Square, Log, ...) still apply, as the spec asks.
    """

    def run(ctx, data, axes=None, *, keepdims, noop_with_empty_axes):
        data = np.asarray(data)
        ax = _axes(data, axes, noop_with_empty_axes, op)
        out = reduce(data.astype(_work_dtype(data.dtype), copy=False), ax)
        if not keepdims:
            out = np.squeeze(out, axis=ax)
        return np.asarray(out).astype(data.dtype, copy=False)

    run.__name__ = run.__qualname__ = "reduce_" + op[len("Reduce") :].lower()
    run.__doc__ = f"The {op} kernel."
    return kernel(op)(run)


def _sum(x, ax):
    """np.sum's reduction, called directly, of x in C order: numpy's sums follow the input's
    memory order (pairwise along a contiguous axis, one running sum per output across a strided
    one), so a transposed view would sum the same values in another order than the arena's
    C-contiguous copy of them that the CPU executor's prepared call reads."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    return np.add.reduce(x, axis=ax, dtype=x.dtype, keepdims=True)


def _mean(x, ax):
    count = math.prod(x.shape[a] for a in ax)
    if x.dtype.kind in "iub":
        # Integer means truncate, as a cast of the exact mean would.
        return np.trunc(np.sum(x, axis=ax, keepdims=True, dtype=np.float64) / count)
    return _sum(x, ax) / x.dtype.type(count)


def _extreme(x, ax, largest: bool):
    """Max or min; the empty set gives the identity (-inf/+inf, or the type's bounds)."""
    if x.dtype == np.bool_:
        initial = not largest
    elif x.dtype.kind == "f":
        initial = -np.inf if largest else np.inf
    else:
        info = np.iinfo(x.dtype)
        initial = info.min if largest else info.max
    fn = np.max if largest else np.min
    return fn(x, axis=ax, keepdims=True, initial=initial)


def _log_sum_exp(x, ax):
    top = np.max(x, axis=ax, keepdims=True, initial=-np.inf)
    # Shift by the maximum for stability; an infinite maximum is not a usable shift.
    shift = np.where(np.isfinite(top), top, 0).astype(x.dtype)
    return shift + np.log(_sum(np.exp(x - shift), ax))


def _l2(x, ax):
    """The square root of the sum of squares. Over a last axis of two (a complex magnitude,
    frontends/tflite_fft.py) the sum is its one addition, written out: numpy's reduction along so
    short an axis costs about 18 ns an element (0.9 ms for 96 x 257 magnitudes), the two strided
    reads about 1 ns, and a sum of two values has one rounding whichever way it is taken."""
    if ax == (x.ndim - 1,) and x.shape[-1] == 2 and x.dtype.kind == "f":
        re, im = x[..., :1], x[..., 1:]
        return np.sqrt(re * re + im * im)
    return np.sqrt(_sum(x * x, ax))


_reduction("ReduceSum", _sum)
_reduction("ReduceMean", _mean)
_reduction("ReduceMax", lambda x, ax: _extreme(x, ax, True))
_reduction("ReduceMin", lambda x, ax: _extreme(x, ax, False))
_reduction("ReduceProd", lambda x, ax: np.prod(np.ascontiguousarray(x), axis=ax, keepdims=True, dtype=x.dtype))
_reduction("ReduceL1", lambda x, ax: _sum(np.abs(x), ax))
_reduction("ReduceL2", _l2)
_reduction("ReduceSumSquare", lambda x, ax: _sum(x * x, ax))
_reduction("ReduceLogSum", lambda x, ax: np.log(_sum(x, ax)))
_reduction("ReduceLogSumExp", _log_sum_exp)


def _arg_extreme(data, axis, keepdims, select_last_index, fn, op):
    data = np.asarray(data)
    axis = normalize_axis(axis, data.ndim, op)
    if select_last_index:
        # The first hit in the reversed axis is the last one in the original order.
        idx = data.shape[axis] - 1 - fn(np.flip(data, axis), axis=axis)
    else:
        idx = fn(data, axis=axis)
    idx = np.asarray(idx, dtype=np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


@kernel("ArgMax")
def argmax(ctx, data, *, axis, keepdims, select_last_index):
    return _arg_extreme(data, axis, keepdims, select_last_index, np.argmax, "ArgMax")


@kernel("ArgMin")
def argmin(ctx, data, *, axis, keepdims, select_last_index):
    return _arg_extreme(data, axis, keepdims, select_last_index, np.argmin, "ArgMin")


def _cumulative(x, axis, exclusive, reverse, fn, identity, op):
    x = np.asarray(x)
    if np.asarray(axis).size != 1:
        raise unsupported(op, f"axis of shape {np.shape(axis)} (one value expected)")
    ax = normalize_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim, op)
    work = x.astype(_work_dtype(x.dtype), copy=False)
    if reverse:
        work = np.flip(work, ax)
    out = fn(work, axis=ax, dtype=work.dtype)
    if exclusive and out.shape[ax]:
        # Each position gets the running result up to, not including, itself.
        out = np.roll(out, 1, axis=ax)
        out[(slice(None),) * ax + (0,)] = identity
    if reverse:
        out = np.flip(out, ax)
    return np.ascontiguousarray(out).astype(x.dtype, copy=False)


@kernel("CumSum")
def cumsum(ctx, x, axis, *, exclusive, reverse):
    return _cumulative(x, axis, exclusive, reverse, np.cumsum, 0, "CumSum")


@kernel("CumProd")
def cumprod(ctx, x, axis, *, exclusive, reverse):
    return _cumulative(x, axis, exclusive, reverse, np.cumprod, 1, "CumProd")


@kernel("TopK")
def topk(ctx, X, K, *, axis, largest, sorted):
    X = np.asarray(X)
    ax = normalize_axis(axis, X.ndim, "TopK")
    k = int(np.asarray(K).reshape(-1)[0])
    n = X.shape[ax]
    if not 0 <= k <= n:
        raise unsupported("TopK", f"k={k} for an axis of size {n}")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, is descending with
        # equal values in increasing index order.
        order = np.argsort(np.flip(X, ax), axis=ax, kind="stable")
        order = n - 1 - np.flip(order, ax)
    else:
        order = np.argsort(X, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax).astype(np.int64)
    return np.take_along_axis(X, idx, axis=ax), idx
