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

from numba import njit

from .pool_loops import _max


@njit(cache=True, nogil=True)
def add_relu(a, b, zero, out):  # pragma: no cover - compiled
    """out = maximum(a + b, zero) as numpy computes each; a, b and out C-contiguous of one size,
    zero a 0 of their type."""
    x, y, o = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    for i in range(o.size):
        o[i] = _max(x[i] + y[i], zero)


@njit(cache=True, nogil=True)
def add_prelu(a, b, slope, out):  # pragma: no cover - compiled
    """out[i, c, k] = v · slope[c] where v = a[i, c, k] + b[i, c, k] is negative, else v (NaN
    and -0 included); a, b and out (outer, C, inner) C-contiguous."""
    n, channels, m = out.shape
    for i in range(n):
        for c in range(channels):
            s = slope[c]
            for k in range(m):
                v = a[i, c, k] + b[i, c, k]
                out[i, c, k] = v * s if v < 0 else v
