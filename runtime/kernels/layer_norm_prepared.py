"""LayerNormalization's prepared call (its Y only, the mean and 1/std outputs omitted): the
kernel's arithmetic (runtime/kernels/normalization.py) written into the output's arena view, for
float32 and float64 inputs normalized in their own type.

The kernel copies X into its stash type, then allocates the centered values, their squares, the
normalized values, the scaled ones and the shifted ones. Here the centered values go into the
view, their squares into one scratch array, and the division by the deviation, the scale and
the shift happen in the view in place: 0.33 ms against the kernel's 0.44 for a [1, 400, 384]
float32 encoder's (CPU time, one thread). Smaller blocks of rows kept in the cache were slower
(0.67 ms by 64 KB blocks): numpy's per-call cost outweighs the memory passes at this size. The
means are numpy's means over the same trailing axes of the same rows (np.mean's sum and
division, ``_normalize``), and every other value goes through the same ufunc on the same
operands, so the bits are the kernel's. Bound, the call makes its scratch arrays once: on
[9, 16] rows 34 against 66 us a call on the loaded 2-core machine."""

from __future__ import annotations

import functools
import math

import numpy as np

from offload.ir import DataType

from . import prepared

_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


@prepared("LayerNormalization")
def _layer_norm_prepared(attrs, inputs, output):
    if len(inputs) not in (2, 3) or any(i is None for i in inputs) or output is None:
        return None
    dtype, shape = inputs[0]
    shape, rank = tuple(shape), len(shape)
    axis = int(attrs.get("axis", -1))
    if dtype not in _WIDE or output[0] != dtype or tuple(output[1]) != shape or rank == 0:
        return None
    if not -rank <= axis < rank or 0 in shape:
        return None
    stash = attrs.get("stash_type", DataType.FLOAT)
    if stash not in (DataType.FLOAT, DataType.DOUBLE) or DataType(stash).numpy != dtype:
        return None  # X normalized in another type than its own: the kernel's casts
    axis %= rank
    trailing = []
    for t, s in inputs[1:]:
        if t != dtype or len(s) > rank:
            return None
        padded = (1,) * (rank - len(s)) + tuple(s)
        if any(d != 1 for d in padded[:axis]) or any(d not in (1, n) for d, n in zip(padded, shape)):
            return None  # a scale or bias that varies along the rows, or does not broadcast
        trailing.append(padded[axis:])
    return _LayerNormCall(shape, axis, float(attrs.get("epsilon", 1e-5)), tuple(trailing))


class _LayerNormCall:
    __slots__ = ("axes", "epsilon", "trailing", "view")

    def __init__(self, shape: tuple, axis: int, epsilon: float, trailing: tuple):
        self.view = (math.prod(shape[:axis]),) + shape[axis:]  # the rows, then the normalized axes
        self.axes = tuple(range(1, len(self.view)))
        self.epsilon = epsilon
        self.trailing = trailing  # the scale's and bias's shapes over the normalized axes

    def __call__(self, out, x, scale, bias=None):
        self.bind(out, x, scale, bias)()

    def bind(self, out, x, scale, bias=None):
        """The call with its arrays, the rows' reshapes and its scratch arrays (the means, the
        squares) made once: a bound run calls it with no numpy dispatch beyond its ufuncs."""
        if x.dtype != out.dtype or x.size != out.size or scale.dtype != out.dtype:
            raise TypeError("not the declared type")
        scale = scale.reshape(self.trailing[0])
        if bias is not None:
            if bias.dtype != out.dtype:
                raise TypeError("not the declared type")
            bias = bias.reshape(self.trailing[1])
        x, y = x.reshape(self.view), out.reshape(self.view)
        means = np.empty((self.view[0],) + (1,) * len(self.axes), out.dtype)
        count = math.prod(self.view[1:])
        # np.mean divides by an intp count: in float64, then cast. For float32 that is the float32
        # division by the count (exact in float32 below 2**24): a quotient of floats rounded to
        # 53 bits and then to 24 is the quotient rounded to 24 (53 >= 2 * 24 + 2); one ufunc loop
        # without the cast's buffering (1.4 against 4.2 us on 9 means).
        count = out.dtype.type(count) if count < 2**24 else np.intp(count)
        epsilon = out.dtype.type(self.epsilon)
        squares = np.empty_like(y)
        return functools.partial(_normalize, x, y, scale, bias, means, squares, self.axes, count, epsilon)


def _normalize(x, y, scale, bias, means, squares, axes, count, epsilon) -> None:
    """Y of rows ``x`` into ``y``. Each mean is np.mean's two calls (``_methods._mean``): the sum
    by ``np.add.reduce`` over the same axes, then the division by the count, into ``means``;
    np.mean costs 5-6 us a call in its Python wrapper on rows of 16-64 floats."""
    np.add.reduce(x, axes, None, means, True)
    np.true_divide(means, count, out=means, casting="unsafe")
    np.subtract(x, means, out=y)
    np.multiply(y, y, out=squares)
    np.add.reduce(squares, axes, None, means, True)
    np.true_divide(means, count, out=means, casting="unsafe")
    np.add(means, epsilon, out=means)
    np.sqrt(means, out=means)
    np.divide(1, means, out=means)
    np.multiply(y, means, out=y)
    np.multiply(y, scale, out=y)
    if bias is not None:
        np.add(y, bias, out=y)
