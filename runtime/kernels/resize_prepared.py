"""Resize as a prepared call: its roi, scales and sizes constants of the file, each axis's taps
and weights (or, in nearest mode, the input element each output copies) found once per arena
set, and each run the interpolation alone, into the output's arena view.

Linear and cubic modes of float32 and float64 resample one axis after the other, in the
kernel's order, with the compiled ``loops.resample`` (``resample_last`` for the last axis): one
pass over the axis where the kernel makes two numpy passes per tap, with the kernel's products
and sums in its order (the same bits). Nearest mode of any type is one ``numpy.take`` of the
composed flat positions. The kernel runs it (its result copied into the view) where the
constants are computed by the graph, the mode is tf_crop_and_resize (extrapolated outputs), the
loops are off, or the output shares the input's memory.
"""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from ._util import compiled_loops
from .buffers import _KeptCalls
from .tensor import _nearest_index, _resize_passes, _resize_plan, _taps, resize


@prepared("Resize")
def _resize_prepared(attrs, inputs, output):
    if not inputs or inputs[0] is None or output is None or inputs[0][0] != output[0]:
        return None
    if inputs[0][0].kind == "O" or len(inputs[0][1]) != len(output[1]):
        return None
    return _ResizeCall(attrs)


_resize_prepared.omitted_inputs = True  # Resize(X, "", scales): the roi (or scales) omitted


class _ResizeCall(_KeptCalls):
    """The calls of a Resize for its constant roi, scales and sizes, made once per set of arrays."""

    __slots__ = ("attrs", "last")
    omitted_inputs = True  # an omitted roi or scales (None) is passed as the kernel gets it

    def __init__(self, attrs: dict):
        self.attrs, self.last = attrs, None

    def _calls(self, out, args) -> tuple:
        calls = self._passes(out, *args)
        if calls is None:
            return (functools.partial(_kernel_into, out, args, self.attrs),)
        return tuple(calls)

    def _passes(self, out, x, *rest) -> list | None:
        a = self.attrs
        if a["coordinate_transformation_mode"] == "tf_crop_and_resize" or len(rest) > 3:
            return None
        if x.dtype != out.dtype or any(v is not None and v.flags.writeable for v in rest):
            return None
        if np.may_share_memory(x, out):
            return None
        roi, scales, sizes = (*rest, None, None, None)[:3]
        plan = _resize_plan(x, roi, scales, sizes, a["axes"], a["keep_aspect_ratio_policy"], False)
        shape = list(x.shape)
        for axis, out_len, *_ in plan:
            shape[axis] = out_len
        if tuple(shape) != out.shape:
            return None
        passes = _resize_passes(x.shape, plan, a["mode"], a["coordinate_transformation_mode"], a["antialias"])
        if not passes:
            return [functools.partial(np.copyto, out, x, casting="no")]
        if a["mode"] == "nearest":
            return [self._nearest(out, x, passes)]
        loops = compiled_loops()
        if loops is None or a["mode"] not in ("linear", "cubic") or x.dtype not in (np.float32, np.float64):
            return None
        return self._resamples(loops, out, x, passes)

    def _nearest(self, out, x, passes):
        index = [np.arange(n) for n in x.shape]
        for axis, coords, _ in passes:
            index[axis] = _nearest_index(coords, x.shape[axis], self.attrs["nearest_mode"])
        flat = np.ravel_multi_index(np.ix_(*index), x.shape)
        return functools.partial(np.take, x.reshape(-1), flat, out=out)

    def _resamples(self, loops, out, x, passes) -> list:
        a, calls, src = self.attrs, [], x
        for k, (axis, coords, stretch) in enumerate(passes):
            in_len = src.shape[axis]
            cols, weights = _taps(
                (
                    a["mode"],
                    coords.tobytes(),
                    in_len,
                    a["cubic_coeff_a"],
                    a["exclude_outside"],
                    stretch,
                    x.dtype.char,
                )
            )
            shape = list(src.shape)
            shape[axis] = len(coords)
            dst = out if k == len(passes) - 1 else np.empty(shape, dtype=x.dtype)
            outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))
            if inner == 1:  # the last axis: tap after tap along output rows
                rows_in, rows_out = src.reshape(outer, in_len), dst.reshape(outer, len(coords))
                taps_major = np.ascontiguousarray(cols.T), np.ascontiguousarray(weights.T)
                calls.append(functools.partial(loops.resample_last, rows_in, *taps_major, rows_out))
            else:
                planes_in, planes_out = (
                    src.reshape(outer, in_len, inner),
                    dst.reshape(outer, len(coords), inner),
                )
                calls.append(functools.partial(loops.resample, planes_in, cols, weights, planes_out))
            src = dst
        return calls


def _kernel_into(out, args, attrs: dict) -> None:
    np.copyto(out, resize(None, *args, **attrs), casting="no")
