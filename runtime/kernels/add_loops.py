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


# Each loop computes a block of this many sums into a buffer of its own, then copies it out: a
# loop that stores where it may load (out is an operand's memory where the memory plan reuses
# it) does not vectorize (add_prelu in place on 64 x 32 x 32: 33 us a call, by blocks 16)
_BLOCK = 512


@njit(cache=True, nogil=True)
def add_relu(a, b, zero, out):  # pragma: no cover - compiled
    """out = maximum(a + b, zero) as numpy computes each; a, b and out C-contiguous of one size,
    zero a 0 of their type."""
    x, y, o = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    block = np.empty(_BLOCK, o.dtype)
    for lo in range(0, o.size, _BLOCK):
        xs, ys, dst = x[lo : lo + _BLOCK], y[lo : lo + _BLOCK], o[lo : lo + _BLOCK]
        for j in range(dst.size):
            v = xs[j] + ys[j]
            block[j] = v if v > zero or v != v else zero  # numpy's maximum(v, 0)
        for j in range(dst.size):
            dst[j] = block[j]


@njit(cache=True, nogil=True)
def add_prelu(a, b, slope, out):  # pragma: no cover - compiled
    """out[i, c, k] = v · slope[c] where v = a[i, c, k] + b[i, c, k] is negative, else v (NaN
    and -0 included); a, b and out (outer, C, inner) C-contiguous."""
    n, channels, m = out.shape
    block = np.empty(_BLOCK, out.dtype)
    for i in range(n):
        for c in range(channels):
            s = slope[c]
            x, y, o = a[i, c], b[i, c], out[i, c]
            for lo in range(0, m, _BLOCK):
                xs, ys, dst = x[lo : lo + _BLOCK], y[lo : lo + _BLOCK], o[lo : lo + _BLOCK]
                for j in range(dst.size):
                    v = xs[j] + ys[j]
                    block[j] = v * s if v < 0 else v
                for j in range(dst.size):
                    dst[j] = block[j]
