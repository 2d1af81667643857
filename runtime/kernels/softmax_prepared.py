"""Softmax's prepared call: the kernel's exp(x - max) / sum (runtime/kernels/normalization.py)
computed in the output's arena view, for float32 and float64 (float32's exp by the compiled loop,
``approximations.exp32_into``, as the kernel's).

The kernel copies its input into its work type first (a copy of the same values where the type
is already float32 or float64) and allocates the shifted values; here the shift, the exp and the
division write the view in place. Each value goes through the same ufuncs, and the sums run over
an array of the same shape and layout as the kernel's, so the bits are the kernel's."""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from .approximations import exp32_into

_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


@prepared("Softmax")
def _softmax_prepared(attrs, inputs, output):
    if len(inputs) != 1 or inputs[0] is None or output is None:
        return None
    dtype, shape = inputs[0]
    rank, axis = len(shape), int(attrs.get("axis", -1))
    if dtype not in _WIDE or output[0] != dtype or tuple(output[1]) != tuple(shape):
        return None
    if rank == 0 or not -rank <= axis < rank or 0 in shape:
        return None
    return _SoftmaxCall(axis % rank)


class _SoftmaxCall:
    __slots__ = ("axis",)
    # A strided input (a Transpose's view) too: the shifted values in the layout numpy gives
    # them from the input's, which is the layout of the kernel's (it shifts a copy of the input
    # in the input's layout, ``astype``'s order K), so the sums run in the kernel's order; the
    # quotients go into the view.
    any_layout = True

    def __init__(self, axis: int):
        self.axis = axis

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        e = out if x.flags.c_contiguous else None
        e = np.subtract(x, np.max(x, axis=self.axis, keepdims=True, initial=-np.inf), out=e)
        if out.dtype == np.float32:
            exp32_into(e, e)
        else:
            np.exp(e, out=e)
        np.divide(e, np.sum(e, axis=self.axis, keepdims=True), out=out)

    def bind(self, out, x):
        """A C-contiguous input's call with the maxima's and sums' arrays made once, and the two
        reductions as the ufuncs' own ``reduce`` (np.max and np.sum's Python wrappers cost 3-4
        us a call on a [2, 9, 9] attention's scores, about half the call); any other input's
        call as above."""
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        if not x.flags.c_contiguous:
            return functools.partial(self, out, x)
        kept = out.shape[: self.axis] + (1,) + out.shape[self.axis + 1 :]
        peaks, sums = np.empty(kept, out.dtype), np.empty(kept, out.dtype)
        exp = exp32_into if out.dtype == np.float32 else np.exp
        return functools.partial(_softmax_into, x, out, peaks, sums, self.axis, exp)


def _softmax_into(x, out, peaks, sums, axis, exp) -> None:
    """``_SoftmaxCall``'s steps on a C-contiguous x: np.max(..., initial=-inf) and np.sum are
    these reductions."""
    np.maximum.reduce(x, axis, None, peaks, True, -np.inf)
    np.subtract(x, peaks, out=out)
    exp(out, out)
    np.add.reduce(out, axis, None, sums, True)
    np.divide(out, sums, out=out)
