"""ShuffleNet's channel shuffle as one prepared call: Concat, Reshape, Transpose, Reshape (and the
channel Slices that read its result).

ShuffleNet concatenates its branches along the channels and interleaves them: Concat to
(N, C, H, W), Reshape to (N, g, C/g, H, W), Transpose (0, 2, 1, 3, 4), Reshape back to
(N, C, H, W), so that channel j * g + i of the result is channel i * C/g + j of the
concatenation; then Slices split the result into channel ranges (the next unit's halves). Step
by step that is a copy of every input (Concat), a view (Transpose), a strided copy of the whole
(the Reshape of a transposed view) and a copy per Slice (a kernel step each), each a step of
the executor. The CPU executor fuses them (runtime/fusions.py, ``_fuse_channel_shuffles``) into
one call that copies each input's channels of group i straight to their places in each result:
per result, group and input one copy of whole rows of H * W floats. Only data moves, so the
results are the steps' bit for bit; the graph and the .pte keep the ops.
"""

from __future__ import annotations

import functools

import numpy as np


class ChannelShuffle:
    """A shuffled concatenation: inputs of ``channels`` channels each, of ``shape`` (N, H, W)
    otherwise and ``dtype``, concatenated and shuffled in ``groups`` groups, written as its
    channel ranges ``ranges`` (the whole (0, C) by default), one result each. As a prepared
    call (one range) its calls are made once per arena set when bound; called unbound, or for
    several results (``write``), it keeps those it made for the last arrays it got (as
    ``conv._ConvCall``)."""

    __slots__ = ("channels", "dtype", "groups", "last", "ranges", "shape")

    def __init__(self, channels: tuple, shape: tuple, dtype, groups: int, ranges: tuple | None = None):
        self.channels, self.shape, self.dtype = tuple(channels), tuple(shape), np.dtype(dtype)
        self.groups = groups
        self.ranges = tuple(ranges) if ranges is not None else ((0, sum(self.channels)),)
        self.last = None  # (outs, xs, calls): one tuple, replaced whole (threads)

    def _calls(self, outs: tuple, xs: tuple) -> tuple:
        n, h, w = self.shape
        c, g = sum(self.channels), self.groups
        if len(xs) != len(self.channels) or len(outs) != len(self.ranges):
            raise TypeError("not the declared arguments")
        for x, ch in zip(xs, self.channels):
            if x.shape != (n, ch, h, w) or x.dtype != self.dtype:
                raise TypeError("not the declared shapes")
        for out, (lo, hi) in zip(outs, self.ranges):
            if out.shape != (n, hi - lo, h, w) or out.dtype != self.dtype:
                raise TypeError("not the declared shapes")
        calls = []
        if any(np.may_share_memory(out, x) for out in outs for x in xs):
            # a planned result may reuse an input's memory: concatenate first, then shuffle
            joined = np.empty((n, c, h, w), self.dtype)
            calls.append(functools.partial(np.concatenate, xs, axis=1, out=joined, casting="no"))
            xs, channels = (joined,), (c,)
        else:
            channels = self.channels
        starts = np.cumsum((0,) + channels)
        sources = [(x.reshape(n, ch, h * w), int(s)) for x, ch, s in zip(xs, channels, starts)]
        cg = c // g
        for out, (lo, hi) in zip(outs, self.ranges):
            places = out.reshape(n, hi - lo, h * w)
            for i in range(g):  # result channel j * g + i is concatenated channel i * cg + j
                j0, j1 = max(0, -(-(lo - i) // g)), min(cg, -(-(hi - i) // g))
                for rows, start in sources:
                    a = max(i * cg + j0, start)
                    b = min(i * cg + j1, start + rows.shape[1])
                    if a >= b:
                        continue
                    first = (a - i * cg) * g + i - lo
                    calls.append(
                        functools.partial(
                            np.copyto,
                            places[:, first : first + (b - a - 1) * g + 1 : g],
                            rows[:, a - start : b - start],
                        )
                    )
        return tuple(calls)

    def write(self, outs: tuple, xs: tuple) -> None:
        """Write the results ``outs`` (one per range) of inputs ``xs``."""
        last = self.last
        if (
            last is None
            or len(outs) != len(last[0])
            or any(a is not b for a, b in zip(outs, last[0]))
            or len(xs) != len(last[1])
            or any(a is not b for a, b in zip(xs, last[1]))
        ):
            last = self.last = (outs, xs, self._calls(outs, xs))
        for call in last[2]:
            call()

    def __call__(self, out, *xs):
        self.write((out,), xs)

    def bind(self, out, *xs):
        calls = self._calls((out,), xs)

        def run():
            for call in calls:
                call()

        return run
