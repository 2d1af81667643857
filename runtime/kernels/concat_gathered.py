"""The prepared call of a Concat that copies some of its parts straight from where the copies
before it read them (runtime/concat_fusions.py pairs the steps): a part a Reshape (or a
Transpose or Identity that only reshapes) made is copied from that op's input, reshaped; a part
a Where of one condition made is copied from the input the condition picks. Each part is one
copy either way: the ops' own copies are not made (a streaming model's state windows: the state
or its initial value, then the newest frame)."""

from __future__ import annotations

import functools

import numpy as np

from .buffers import _run_calls
from .where_prepared import _where_one

# How many of the call's arguments each kind of part reads: the part itself, the input of the
# op that reshaped it, or the condition and two inputs of its Where.
PART_ARGS = {"part": 1, "reshaped": 1, "chosen": 3}


class _GatheredConcatCall:
    """Concat on ``axis`` of parts (``kinds``, PART_ARGS; ``shapes`` each part's declared shape)
    into ``out``, each copied into its place from its source; bound, the places are views taken
    once and each run is one copy a part. One reshaped source may share out's memory (an arena
    place its op's last read left free): its part is copied first, before any other part writes
    over it (numpy copies between overlapping arrays as if through a buffer). More such sources,
    or a part that does not fit its place, are refused (TypeError: the ops' kernels run instead)."""

    __slots__ = ("axis", "kinds", "shapes")

    def __init__(self, axis: int, kinds: tuple, shapes: tuple):
        self.axis, self.kinds, self.shapes = axis, kinds, shapes

    def __call__(self, out, *args):
        self.bind(out, *args)()

    def bind(self, out, *args):
        axis, start, calls, at, first = self.axis % out.ndim, 0, [], 0, None
        for kind, shape in zip(self.kinds, self.shapes):
            sources = args[at : at + PART_ARGS[kind]]
            at += PART_ARGS[kind]
            place = out[(slice(None),) * axis + (slice(start, start + shape[axis]),)]
            start += shape[axis]
            if place.shape != shape:
                raise TypeError("a part that does not fit its place")
            if any(np.may_share_memory(s, out) for s in sources):
                if kind != "reshaped" or first is not None:
                    raise TypeError("parts that lie over the result")
                first = len(calls)
            if kind == "chosen":
                c, x, y = sources
                if c.size != 1 or c.dtype != np.bool_ or x.dtype != out.dtype or y.dtype != out.dtype:
                    raise TypeError("not the declared types")
                calls.append(functools.partial(_where_one, place, c.reshape(()), x, y))
                continue
            (x,) = sources
            if x.dtype != out.dtype or x.size != place.size or (kind == "part" and x.shape != shape):
                raise TypeError("not the declared types")
            calls.append(functools.partial(np.copyto, place, x.reshape(shape), casting="no"))
        if at != len(args) or start != out.shape[axis]:
            raise TypeError("not the declared parts")
        if first is not None:
            calls.insert(0, calls.pop(first))
        return functools.partial(_run_calls, tuple(calls))
