"""LayerNormalization's prepared call (its Y only, the mean and 1/std outputs omitted): the
kernel's arithmetic (runtime/kernels/normalization.py) written into the output's arena view, a
block of rows at a time, for float32 and float64 inputs normalized in their own type.

The kernel copies X into its stash type, then allocates the centered values, their squares, the
normalized values, the scaled ones and the shifted ones: seven passes over arrays of X's size
that leave the cache. Here each block of rows (about 64 KB of X) is centered into its part of
the view, squared into one small scratch block, and scaled, multiplied and shifted in place
while it is in the cache. The means are numpy's means of the same rows over the same trailing
axes (a block is whole rows, so each row's sum runs as in the kernel's array), and every other
value goes through the same ufunc on the same operands, so the bits are the kernel's."""

from __future__ import annotations

import math

import numpy as np

from offload.ir import DataType

from . import prepared

_WIDE = (np.dtype(np.float32), np.dtype(np.float64))
_BLOCK_BYTES = 64 * 1024


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
    return _LayerNormCall(shape, axis, float(attrs.get("epsilon", 1e-5)), tuple(trailing), dtype.itemsize)


class _LayerNormCall:
    __slots__ = ("axes", "epsilon", "rows", "step", "trailing", "view")

    def __init__(self, shape: tuple, axis: int, epsilon: float, trailing: tuple, itemsize: int):
        self.rows = math.prod(shape[:axis])
        self.view = (self.rows,) + shape[axis:]
        self.axes = tuple(range(1, len(self.view)))
        self.epsilon = epsilon
        self.trailing = trailing  # the scale's and bias's shapes over the normalized axes
        row_bytes = math.prod(shape[axis:]) * itemsize
        self.step = max(1, _BLOCK_BYTES // row_bytes)

    def __call__(self, out, x, scale, bias=None):
        if x.dtype != out.dtype or x.size != out.size or scale.dtype != out.dtype:
            raise TypeError("not the declared type")
        scale = scale.reshape(self.trailing[0])
        if bias is not None:
            if bias.dtype != out.dtype:
                raise TypeError("not the declared type")
            bias = bias.reshape(self.trailing[1])
        xs, ys = x.reshape(self.view), out.reshape(self.view)
        eps = x.dtype.type(self.epsilon)
        axes, step = self.axes, self.step
        squares = np.empty((min(step, self.rows),) + self.view[1:], x.dtype)
        for lo in range(0, self.rows, step):
            xb, yb = xs[lo : lo + step], ys[lo : lo + step]
            sq = squares[: len(xb)]
            np.subtract(xb, np.mean(xb, axis=axes, keepdims=True), out=yb)
            np.multiply(yb, yb, out=sq)
            inv_std = np.mean(sq, axis=axes, keepdims=True)
            np.add(inv_std, eps, out=inv_std)
            np.sqrt(inv_std, out=inv_std)
            np.divide(1, inv_std, out=inv_std)
            np.multiply(yb, inv_std, out=yb)
            np.multiply(yb, scale, out=yb)
            if bias is not None:
                np.add(yb, bias, out=yb)
