"""Pad as a prepared call: the input copied into the middle of the output's view, each padded
axis's borders then copied from the output itself (reflect, edge) or filled (constant).

``numpy.pad`` (the kernel's) costs 20-40 us of Python a call whatever the size: Silero VAD pads
its 512 samples by reflection at every run. Every element of the result is a copy of an input
element or the constant, so the calls give the kernel's values bit for bit. Axis after axis, each
border copy spans the borders of the axes before it, as numpy.pad fills them: the corners come
out as numpy's. Negative pads (crops), reflections wider than the axis, "wrap", and pads the
graph computes take the kernel's way.
"""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from .buffers import _KeptCalls
from .tensor import pad


@prepared("Pad")
def _pad_prepared(attrs, inputs, output):
    if attrs["mode"] not in ("constant", "reflect", "edge") or not inputs or output is None:
        return None
    if inputs[0][0] != output[0] or inputs[0][0].kind == "O" or len(inputs[0][1]) != len(output[1]):
        return None
    if len(inputs) > 2 and attrs["mode"] != "constant":  # a value (or axes) the mode ignores: the kernel's
        return None
    return _PadCall(attrs["mode"])


class _PadCall(_KeptCalls):
    """The calls of a Pad for its constant pads (and value), made once per set of arrays."""

    __slots__ = ("last", "mode")

    def __init__(self, mode: str):
        self.mode, self.last = mode, None

    def _calls(self, out, args) -> tuple:
        calls = self._copies(out, *args)
        if calls is None:  # computed pads or value, crops, wide reflections: the kernel into out
            return (functools.partial(_kernel_into, out, args, self.mode),)
        return tuple(calls)

    def _copies(self, out, x, pads, *rest) -> list | None:
        if pads.flags.writeable or pads.dtype.kind not in "iu" or pads.shape != (2 * x.ndim,):
            return None
        if len(rest) > 1 or (rest and (rest[0].flags.writeable or rest[0].size != 1)):
            return None
        p = [int(v) for v in pads]
        before, after = p[: x.ndim], p[x.ndim :]
        if min(p) < 0 or tuple(d + b + e for d, b, e in zip(x.shape, before, after)) != out.shape:
            return None
        if self.mode == "reflect" and any(
            (b or e) and (b >= d or e >= d) for d, b, e in zip(x.shape, before, after)
        ):
            return None
        middle = tuple(slice(b, b + d) for b, d in zip(before, x.shape))
        calls = [functools.partial(np.copyto, out[middle], x)]
        value = np.asarray(rest[0] if rest else 0).reshape(()).astype(x.dtype)
        for axis, (b, d, e) in enumerate(zip(before, x.shape, after)):
            calls += self._borders(out, axis, b, d, e, value)
        return calls

    def _borders(self, out, axis: int, b: int, d: int, e: int, value) -> list:
        def at(s: slice):
            return out[(slice(None),) * axis + (s,)]

        calls = []
        if b:
            if self.mode == "constant":
                calls.append(functools.partial(np.copyto, at(slice(0, b)), value))
            elif self.mode == "edge":
                calls.append(functools.partial(np.copyto, at(slice(0, b)), at(slice(b, b + 1))))
            else:  # position p < b mirrors 2b - p
                calls.append(functools.partial(np.copyto, at(slice(0, b)), at(slice(2 * b, b, -1))))
        if e:
            end = b + d
            if self.mode == "constant":
                calls.append(functools.partial(np.copyto, at(slice(end, end + e)), value))
            elif self.mode == "edge":
                calls.append(functools.partial(np.copyto, at(slice(end, end + e)), at(slice(end - 1, end))))
            else:  # position end - 1 + k mirrors end - 1 - k
                stop = end - 2 - e
                calls.append(
                    functools.partial(
                        np.copyto,
                        at(slice(end, end + e)),
                        at(slice(end - 2, stop if stop >= 0 else None, -1)),
                    )
                )
        return calls


def _kernel_into(out, args, mode: str) -> None:
    np.copyto(out, pad(None, *args, mode=mode), casting="no")
