"""Gelu's prepared call: the kernel's GELU (runtime/kernels/elementwise.py) written into the
output's arena view, for float32 and float64.

approximate="none" of float32 is the compiled loop ``loops.gelu32`` writing the view (the
kernel's own loop, which writes an array it allocates), or the kernel's numpy twin copied in
where numba is missing; of float64 the kernel's erf expression copied in. approximate="tanh"
is the kernel's expression ``0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`` with each ufunc
writing the view in place: the same ufuncs on the same values in the same order, so the same
bits, and one temporary (0.5 x) instead of seven."""

from __future__ import annotations

import math

import numpy as np

from . import prepared
from ._util import compiled_loops
from .approximations import _gelu_exact

_WIDE = (np.dtype(np.float32), np.dtype(np.float64))
_TANH_SCALE = math.sqrt(2.0 / math.pi)


@prepared("Gelu")
def _gelu_prepared(attrs, inputs, output):
    if len(inputs) != 1 or inputs[0] is None or output is None:
        return None
    dtype, shape = inputs[0]
    if dtype not in _WIDE or output[0] != dtype or tuple(output[1]) != tuple(shape):
        return None
    approximate = attrs.get("approximate", "none")
    if approximate == "none":
        loops = compiled_loops() if dtype == np.float32 else None
        return _ExactCall(loops.gelu32 if loops is not None else None)
    if approximate == "tanh":
        return _TanhCall()
    return None  # the kernel names what it does not support


class _ExactCall:
    __slots__ = ("loop",)

    def __init__(self, loop):
        self.loop = loop

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        if self.loop is not None:
            self.loop(x, out)
        else:
            np.copyto(out, _gelu_exact(x), casting="no")


class _TanhCall:
    __slots__ = ()

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        np.power(x, 3, out=out)
        np.multiply(0.044715, out, out=out)
        np.add(x, out, out=out)
        np.multiply(_TANH_SCALE, out, out=out)
        np.tanh(out, out=out)
        np.add(1.0, out, out=out)
        np.multiply(np.multiply(0.5, x), out, out=out)
