"""Compiled loops (numba) for an Add of two tensors of one shape and the activation that alone
reads its sum (``add_relu``, ``add_prelu``), re-exported by loops.py and reached through
``_util.compiled_loops()`` like the others.

A residual block ends with ``Add`` then ``Relu`` or ``PRelu`` (BlazeFace's and the iris
landmark net's blocks): numpy writes the sum, then reads it again for the activation, two
passes over the map where one does. Each loop computes per element the Add's float sum, then
the activation's numpy arithmetic on it: ``Relu`` as numpy's ``maximum(sum, 0)`` (the sum
where it is greater or NaN, else +0: a sum of -0 gives +0, as numpy's does), ``PRelu`` and
``LeakyRelu`` as ``loops.prelu`` (the sum times the slope where it is negative, else the sum),
so that the results are those of the two ops bit for bit. Each element is read before it is
written, so ``out`` may be either operand's memory."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._loop_blocks import _BLOCK, _same_memory


@njit(cache=True, nogil=True, inline="always")
def _relu1(v, zero):  # pragma: no cover - compiled
    return v if v > zero or v != v else zero  # numpy's maximum(v, 0): +0 of -0, NaN kept


@njit(cache=True, nogil=True)
def add_relu(a, b, zero, out):  # pragma: no cover - compiled
    """out = maximum(a + b, zero) as numpy computes each; a, b and out C-contiguous of one size
    (by blocks where out is a's or b's memory, ``_BLOCK``), zero a 0 of their type."""
    x, y, o = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    if not (_same_memory(x, o) or _same_memory(y, o)):
        for i in range(o.size):
            o[i] = _relu1(x[i] + y[i], zero)
        return
    block = np.empty(_BLOCK, o.dtype)
    for lo in range(0, o.size, _BLOCK):
        xs, ys, dst = x[lo : lo + _BLOCK], y[lo : lo + _BLOCK], o[lo : lo + _BLOCK]
        for j in range(dst.size):
            block[j] = _relu1(xs[j] + ys[j], zero)
        for j in range(dst.size):
            dst[j] = block[j]


@njit(cache=True, nogil=True, inline="always")
def _prelu1(v, s):  # pragma: no cover - compiled
    return v * s if v < 0 else v


@njit(cache=True, nogil=True)
def add_prelu(a, b, slope, out):  # pragma: no cover - compiled
    """out[i, c, k] = v · slope[c] where v = a[i, c, k] + b[i, c, k] is negative, else v (NaN
    and -0 included); a, b and out (outer, C, inner) C-contiguous (by blocks where out is a's or
    b's memory, ``_BLOCK``)."""
    n, channels, m = out.shape
    in_place = _same_memory(a, out) or _same_memory(b, out)
    block = np.empty(_BLOCK if in_place else 0, out.dtype)
    for i in range(n):
        for c in range(channels):
            s = slope[c]
            x, y, o = a[i, c], b[i, c], out[i, c]
            if not in_place:
                for k in range(m):
                    o[k] = _prelu1(x[k] + y[k], s)
                continue
            for lo in range(0, m, _BLOCK):
                xs, ys, dst = x[lo : lo + _BLOCK], y[lo : lo + _BLOCK], o[lo : lo + _BLOCK]
                for j in range(dst.size):
                    block[j] = _prelu1(xs[j] + ys[j], s)
                for j in range(dst.size):
                    dst[j] = block[j]
