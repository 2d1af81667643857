"""ShuffleNet's channel shuffle as one prepared call: Concat, Reshape, Transpose, Reshape.

ShuffleNet concatenates its branches along the channels and interleaves them: Concat to
(N, C, H, W), Reshape to (N, g, C/g, H, W), Transpose (0, 2, 1, 3, 4), Reshape back to
(N, C, H, W), so that channel j * g + i of the result is channel i * C/g + j of the
concatenation. Step by step that is a copy of every input (Concat), a view (Transpose) and a
strided copy of the whole (the Reshape of a transposed view), each a step of the executor. The
CPU executor pairs the four (runtime/module.py, ``_fuse_channel_shuffles``) into one call that
copies each input's channels of group i straight to their places in the result: per input and
group one copy of whole rows of H * W floats. Only data moves, so the result is the four
steps' bit for bit; the graph and the .pte keep the four ops.
"""

from __future__ import annotations

import functools

import numpy as np


class ChannelShuffle:
    """The prepared call of a shuffled concatenation: inputs of ``channels`` channels each, of
    ``shape`` (N, H, W) otherwise and ``dtype``, concatenated and shuffled in ``groups`` groups
    into out (N, sum(channels), H, W). Its calls are made once per arena set when bound; called
    unbound, it keeps those it made for the last arrays it got (as ``nn._ConvCall``)."""

    __slots__ = ("channels", "dtype", "groups", "last", "shape")

    def __init__(self, channels: tuple, shape: tuple, dtype, groups: int):
        self.channels, self.shape, self.dtype, self.groups = (
            tuple(channels),
            tuple(shape),
            np.dtype(dtype),
            groups,
        )
        self.last = None  # (out, xs, calls): one tuple, replaced whole (threads)

    def _calls(self, out, xs) -> tuple:
        n, h, w = self.shape
        c, g = sum(self.channels), self.groups
        if len(xs) != len(self.channels) or out.shape != (n, c, h, w) or out.dtype != self.dtype:
            raise TypeError("not the declared shapes")
        for x, ch in zip(xs, self.channels):
            if x.shape != (n, ch, h, w) or x.dtype != self.dtype:
                raise TypeError("not the declared shapes")
        calls = []
        if any(np.may_share_memory(out, x) for x in xs):
            # the planned result may reuse an input's memory: concatenate first, then shuffle
            joined = np.empty((n, c, h, w), self.dtype)
            calls.append(functools.partial(np.concatenate, xs, axis=1, out=joined, casting="no"))
            xs, channels = (joined,), (c,)
        else:
            channels = self.channels
        cg = c // g
        places = out.reshape(n, cg, g, h * w)  # places[:, j, i] is channel j * g + i
        start = 0
        for x, ch in zip(xs, channels):
            rows = x.reshape(n, ch, h * w)
            for i in range(start // cg, -(-(start + ch) // cg)):
                lo, hi = max(start, i * cg), min(start + ch, (i + 1) * cg)  # concatenation channels
                calls.append(
                    functools.partial(
                        np.copyto, places[:, lo - i * cg : hi - i * cg, i], rows[:, lo - start : hi - start]
                    )
                )
            start += ch
        return tuple(calls)

    def __call__(self, out, *xs):
        last = self.last
        if (
            last is None
            or last[0] is not out
            or len(xs) != len(last[1])
            or any(a is not b for a, b in zip(xs, last[1]))
        ):
            last = self.last = (out, xs, self._calls(out, xs))
        for call in last[2]:
            call()

    def bind(self, out, *xs):
        calls = self._calls(out, xs)

        def run():
            for call in calls:
                call()

        return run
