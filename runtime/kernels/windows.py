"""Windows of convolutions and pools: their geometry over the padded input, views and folds of them."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from offload.errors import ShapeError
from offload.ir.window_cost import check_window_cost

from . import _util
from ._util import unsupported
from .linalg import widened

# ---------------------------------------------------------------------------- geometry


class _Geom(NamedTuple):
    """Where the windows of a convolution or pool lie along each spatial axis."""

    kernel: tuple
    strides: tuple
    dilations: tuple
    begin: tuple  # padding before each spatial axis
    end: tuple  # padding after it (including any that ceil_mode needs)
    out: tuple  # output spatial shape


def _ints(values, n: int, default: int) -> tuple:
    return tuple(int(v) for v in values) if values else (default,) * n


def _pads(op, auto_pad, pads, size, kernel, strides, dilations):
    """(begin, end) paddings from the pads attribute or the auto_pad rule."""
    nd = len(size)
    if auto_pad in ("NOTSET", ""):
        p = _ints(pads, 2 * nd, 0)
        return p[:nd], p[nd:]
    if auto_pad == "VALID":
        return (0,) * nd, (0,) * nd
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise unsupported(op, f"auto_pad={auto_pad!r}")
    begin, end = [], []
    for i, k, s, d in zip(size, kernel, strides, dilations):
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


def _geometry(op, x_shape, kernel, auto_pad, dilations, pads, strides, ceil_mode=0) -> _Geom:
    """The windows of a conv or pool over an input of ``x_shape``, worked out once per shape and
    attributes (an exported model with symbolic sizes runs its convs unplanned: 8-10 us a call)."""
    key = (op, tuple(x_shape), *(tuple(a) if a else () for a in (kernel, dilations, pads, strides)))
    return _geometry_of(*key, auto_pad, ceil_mode, _util.MAX_RESULT_BYTES)


@functools.lru_cache(maxsize=1024)
def _geometry_of(op, x_shape, kernel, dilations, pads, strides, auto_pad, ceil_mode, limit) -> _Geom:
    size = tuple(x_shape[2:])
    nd = len(size)
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != nd:
        raise ShapeError(f"{op}: kernel of rank {len(kernel)} for input of shape {tuple(x_shape)}")
    strides = _ints(strides, nd, 1)
    dilations = _ints(dilations, nd, 1)
    if min(strides + dilations, default=1) < 1:
        raise ShapeError(f"{op}: strides {strides} and dilations {dilations} must be at least 1")
    begin, end = _pads(op, auto_pad, pads, size, kernel, strides, dilations)
    if min(begin + end, default=0) < 0:
        raise ShapeError(f"{op}: pads {tuple(begin + end)} must not be negative (ONNX pads are >= 0)")
    out, ends = [], []
    for i, k, s, d, b, e in zip(size, kernel, strides, dilations, begin, end):
        span = i + b + e - ((k - 1) * d + 1)
        if span < 0:
            raise ShapeError(f"{op}: kernel {kernel} does not fit the padded input of shape {tuple(x_shape)}")
        if ceil_mode:
            o = -(-span // s) + 1
            # A window that would start in the end padding is dropped.
            if (o - 1) * s >= i + b:
                o -= 1
        else:
            o = span // s + 1
        out.append(o)
        ends.append(max(e, (o - 1) * s + (k - 1) * d + 1 - i - b))
    # Bounded before anything is made (ir/window_cost.py): the padded input a kernel builds, the
    # result and a pool's work, so that huge pads, dilations or windows are refused at once.
    padded = tuple(i + b + e for i, b, e in zip(size, begin, ends))
    check_window_cost(op, tuple(x_shape[:2]), padded, tuple(out), kernel, op.endswith("Pool"), limit)
    return _Geom(kernel, strides, dilations, begin, tuple(ends), tuple(out))


def _padded(x, g: _Geom, fill=0):
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(g.begin, g.end)), constant_values=fill)


def _fold_windows(x, g: _Geom, ufunc, fill=0, out=None):
    """``ufunc`` folded over each window: (N, C, *out), one whole-tensor step per kernel offset.

    Pools reduce this way rather than over the window view's trailing axes, which numpy
    walks element by element. Maximum, whose result does not depend on the order, folds one
    spatial axis at a time instead (``_fold_axes``): sum(kernel) steps, not prod(kernel).
    """
    # unpadded, the input itself, unless the planned output reuses its memory
    shared = out is not None and np.may_share_memory(out, x)
    xp = _padded(x, g, fill) if any(g.begin) or any(g.end) or shared else x
    if ufunc is np.maximum:
        return _fold_axes(xp, g, ufunc, out)
    result = None
    for k in np.ndindex(*g.kernel):
        where = tuple(
            slice(ki * d, ki * d + s * (o - 1) + 1, s)
            for ki, d, s, o in zip(k, g.dilations, g.strides, g.out)
        )
        piece = xp[(slice(None), slice(None), *where)]
        if result is None and out is None:
            result = piece.copy()
        elif result is None:
            np.copyto(out, piece)
            result = out
        else:
            ufunc(result, piece, out=result)
    return result


def _fold_axes(xp, g: _Geom, ufunc, out=None):
    """``ufunc`` folded over the windows of the padded xp, one spatial axis after another: for a
    3 x 3 max pool 2 + 2 whole-tensor steps on shrinking arrays rather than 8. Exact only for an
    order-free ``ufunc`` (maximum, minimum)."""
    result = xp
    for i, (k, s, d, o) in enumerate(zip(g.kernel, g.strides, g.dilations, g.out)):
        axis = 2 + i
        taps = [result[(slice(None),) * axis + (slice(j * d, j * d + s * (o - 1) + 1, s),)] for j in range(k)]
        last = i == len(g.kernel) - 1
        acc = out if last and out is not None else np.empty(taps[0].shape, xp.dtype)
        np.copyto(acc, taps[0])
        for piece in taps[1:]:
            ufunc(acc, piece, out=acc)
        result = acc
    return result


def _windows(x, g: _Geom, fill=0):
    """Read-only view (N, C, *out, *kernel) of x padded with ``fill``.

    Element [.., o, k] is x[.., o*s + k*d - begin].
    """
    xp = _padded(x, g, fill)
    spatial = xp.strides[2:]
    return as_strided(
        xp,
        xp.shape[:2] + g.out + g.kernel,
        xp.strides[:2]
        + tuple(a * s for a, s in zip(spatial, g.strides))
        + tuple(a * d for a, d in zip(spatial, g.dilations)),
        writeable=False,
    )


def _scatter_windows(buf, cols, strides, dilations):
    """Add cols (N, C, *kernel, *out) into buf (N, C, *padded) at buf[.., o*s + k*d]: col2im."""
    nd = len(strides)
    kernel, out = cols.shape[2 : 2 + nd], cols.shape[2 + nd :]
    for k in np.ndindex(*kernel):
        where = tuple(
            slice(ki * d, ki * d + s * (o - 1) + 1, s) for ki, d, s, o in zip(k, dilations, strides, out)
        )
        buf[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + k]


def _channel_bias(B, nd: int):
    return widened(B).reshape((1, -1) + (1,) * nd)


def _columns(xp, g: _Geom):
    """Read-only view (C, *kernel, *out) of one padded image xp (C, *padded): the im2col matrix in
    the weights' (C, kernel) order, element [c, k, o] = xp[c, o*s + k*d]. One copy of it into a
    buffer took 0.6-0.9x the time of the window view's transpose, or of a copy per kernel offset,
    on the light models' convs."""
    spatial = xp.strides[1:]
    return as_strided(
        xp,
        xp.shape[:1] + g.kernel + g.out,
        xp.strides[:1]
        + tuple(a * d for a, d in zip(spatial, g.dilations))
        + tuple(a * s for a, s in zip(spatial, g.strides)),
        writeable=False,
    )
