"""Prepared calls of ReduceSum, ReduceMean, ReduceMax and ReduceMin: the kernels' own reductions
(runtime/kernels/reduction.py, numpy's pairwise sums over the same C-contiguous input) into the
output's arena view, the axes read once where they are a constant of the file.

A kernel step of these costs its context, the axes' parsing, a squeeze and the copy of its result
(about 10 µs of Python, the whole of a voice-activity net's mean over 129 x 8 frequency bins);
the call is one reduction and one copy."""

from __future__ import annotations

import functools
import math

import numpy as np

from . import prepared
from .reduction import _axes, _extreme, _mean, _sum


def _max(x, ax):
    return _extreme(x, ax, True)


def _min(x, ax):
    return _extreme(x, ax, False)


# op → (its kernel's reduction of the input in its work type, the input kinds it is prepared for):
# float32 and float64 compute in their own type; a mean of integers truncates in float64, left to
# the kernel.
_REDUCE = {
    "ReduceSum": (_sum, "f"),
    "ReduceMean": (_mean, "f"),
    "ReduceMax": (_max, "fiu"),
    "ReduceMin": (_min, "fiu"),
}
_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


def _factory(op: str):
    reduce, kinds = _REDUCE[op]

    def factory(attrs, inputs, output):
        if not inputs or len(inputs) > 2 or inputs[0] is None or output is None:
            return None
        dtype, shape = inputs[0]
        if dtype != output[0] or dtype.kind not in kinds or (dtype.kind == "f" and dtype not in _WIDE):
            return None
        if len(inputs) == 2 and (inputs[1] is None or inputs[1][0].kind not in "iu"):
            return None
        if 0 in shape:  # an empty reduction's identity: the kernel's
            return None
        return _ReduceCall(op, reduce, bool(attrs.get("noop_with_empty_axes")), tuple(output[1]))

    factory.__name__ = factory.__qualname__ = f"_{op[len('Reduce') :].lower()}_prepared"
    return factory


for _op in _REDUCE:
    prepared(_op)(_factory(_op))


class _ReduceCall:
    """``reduce`` of the input over the axes, copied into the view (its shape with or without the
    kept dims: the kernel's squeeze of them). A constant ``axes`` input is read once (when the
    call is bound, or at its first call); axes a run computes are read at each call."""

    __slots__ = ("kept", "noop", "op", "reduce", "shape")

    def __init__(self, op: str, reduce, noop: bool, shape: tuple):
        self.op, self.reduce, self.noop, self.shape = op, reduce, noop, shape
        self.kept = None  # (a read-only axes array, the axes it gives), replaced whole

    def _into(self, out, data, ax):
        np.copyto(out, self.reduce(data, ax).reshape(self.shape), casting="no")

    def __call__(self, out, data, axes=None):
        kept = self.kept
        if kept is not None and kept[0] is axes and data.ndim == kept[2]:
            return self._into(out, data, kept[1])
        ax = _axes(data, axes, self.noop, self.op)
        if axes is not None and not axes.flags.writeable:  # a constant: read once
            self.kept = (axes, ax, data.ndim)
        self._into(out, data, ax)

    def bind(self, out, data, axes=None):
        if axes is not None and axes.flags.writeable:  # computed by the graph
            return functools.partial(self, out, data, axes)
        ax = _axes(data, axes, self.noop, self.op)
        if ax and self.reduce in (_sum, _mean) and data.flags.c_contiguous:  # _sum's order
            kept = out.reshape(tuple(1 if a in ax else d for a, d in enumerate(data.shape)))
            if np.may_share_memory(kept, out) and not np.may_share_memory(out, data):
                if self.reduce is _sum:
                    return functools.partial(np.add.reduce, data, ax, data.dtype, kept, True)
                count = data.dtype.type(math.prod(data.shape[a] for a in ax))
                return functools.partial(_mean_into, kept, data, ax, count)
        return functools.partial(self._into, out, data, ax)


def _mean_into(kept: np.ndarray, data: np.ndarray, ax: tuple, count) -> None:
    """reduction._mean's sum and division of a float input, written into the output's view with
    the reduced dims kept (``kept``) instead of into new arrays copied there: the same operations
    on the same values, two calls where the kernel's way takes five (7 against 2 us on one
    element)."""
    np.add.reduce(data, ax, data.dtype, kept, True)
    np.divide(kept, count, kept)
