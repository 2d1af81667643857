"""Pooling kernels: MaxPool, AveragePool, LpPool, the global pools and MaxUnpool.

Pools reduce the window view of the padded input.
"""

from __future__ import annotations

import functools
from math import prod

import numpy as np

from offload.errors import OffloadError

from . import kernel, prepared
from ._util import check_result, compiled_loops, out_for, unsupported
from .buffers import _arena_buffers, _run_calls, _thread_buffers
from .linalg import widened
from .windows import _fold_windows, _Geom, _geometry, _ints, _pads, _windows

# ---------------------------------------------------------------------------- pooling


def _window_axes(win) -> tuple:
    nd = (win.ndim - 2) // 2
    return tuple(range(2 + nd, 2 + 2 * nd))


def _lowest(dtype):
    return -np.inf if np.dtype(dtype).kind not in "iub" else np.iinfo(dtype).min


def _max_indices(first, g: _Geom, shape, storage_order: int):
    """Flat input indices (N, C, *out) of the window maxima, ``first`` being their place in the window."""
    n, c = shape[:2]
    size = shape[2:]
    nd = len(size)
    k_at = np.unravel_index(first, g.kernel)
    o_at = np.indices(g.out)
    at = [o_at[i] * g.strides[i] - g.begin[i] + k_at[i] * g.dilations[i] for i in range(nd)]
    # Row-major (storage_order 0) or column-major (1) position within each image.
    order = range(nd) if storage_order == 0 else reversed(range(nd))
    flat = np.zeros(first.shape, np.int64)
    for i in order:
        flat = flat * size[i] + at[i]
    image = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * nd)
    return image * prod(size) + flat


def _pool_calls(out, x, g: _Geom, ufunc, fill, buffers, divisor=None) -> list:
    """A 2-D pool of C-contiguous x into out as numpy calls with fixed operands: ``ufunc``
    (maximum, or add for the sums of AveragePool, which then divides them by ``divisor``) folded
    over each window one spatial axis after the other (as ``_fold_axes``: for 3 x 3, 2 + 2 whole
    views, not 8). The padding is a buffer whose border holds ``fill``, filled when made
    (``_Buffers``).

    The folds read the image as rows of all channels one after the other, so that a tap is one
    view of the whole tensor: along the height a flat slice (stride 1) or every ``sh``-th row;
    along the width a flat slice with stride ``sw``. Rows past a channel's last window and
    columns past a row's last one are computed from the next channel's or row's elements and
    dropped when the result is read out (``valid``); the padding buffer's height and width are
    multiples of the strides, so that every channel's and row's windows start alike. Per-channel
    views instead make numpy loop over rows as short as the output's: on inception_v2's pools the
    width taps of a 7 x 7 map took 3-5x the time of the flat ones. Without a padding buffer an
    image whose height (width) is not a multiple of the stride is folded by views per channel
    (row); a width fold of two taps without a division writes straight into out (the read-out
    would cost what the flat fold saves)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = g.kernel, g.strides, g.dilations, g.out
    loops = compiled_loops()
    if loops is not None and _loop_pays(g, ufunc) and _loop_may_write(out, x, g):
        return [_loop_call(loops, out, x, g, ufunc, fill, divisor)]
    if _same_size(g, x.shape) and not np.may_share_memory(out, x):
        return _same_size_pool_calls(out, x, g, ufunc, buffers, divisor)
    if _stem(g, x.shape):
        return _stem_pool_calls(out, x, ufunc, buffers, divisor)
    calls = []
    # The first fold reads all of x into ``rows``; out, written after, may start where x does
    # (the memory plan puts a pool's smaller output there: emit/plan.py SHRINKS_OVER).
    if any(g.begin) or any(g.end):
        hp = -(-(h + g.begin[0] + g.end[0]) // sh) * sh
        wp = -(-(w + g.begin[1] + g.end[1]) // sw) * sw
        # keyed by the map's size too: sizes that round up alike have their borders elsewhere
        xp = buffers.get(("pool", g.begin, g.end, (h, w)), (n, c, hp, wp), x.dtype, fill)
        interior = xp[:, :, g.begin[0] : g.begin[0] + h, g.begin[1] : g.begin[1] + w]
        calls.append(functools.partial(np.copyto, interior, x))
    else:
        xp, hp, wp = x, h, w
    images = n * c
    # along the height: rows (images, per image, wp) holding the folds of each window's rows
    if hp % sh == 0:
        per_image = hp // sh
        computed = (images - 1) * per_image + oh  # rows through the last image's last window
        flat = xp.reshape(images * hp, wp)
        taps = [flat[i * dh : i * dh + sh * (computed - 1) + 1 : sh] for i in range(kh)]
    else:
        per_image = oh
        computed = images * oh
        taps = [xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh].reshape(images, oh, wp) for i in range(kh)]
    rows = buffers.get(("pool rows",), (images * per_image, wp), x.dtype)
    acc = rows[:computed] if hp % sh == 0 else rows.reshape(images, oh, wp)
    calls.extend(_fold(ufunc, taps, acc))
    # along the width: into out, or flat into cols and read out
    by_rows = rows.reshape(n, c, per_image, wp)
    if wp % sw or (kw < 3 and divisor is None):
        taps = [by_rows[:, :, :oh, j * dw : j * dw + sw * (ow - 1) + 1 : sw] for j in range(kw)]
        calls.extend(_fold(ufunc, taps, out))
        if divisor is not None:
            calls.append(functools.partial(np.divide, out, divisor, out=out))
        return calls
    wc = wp // sw
    count = (computed - 1) * wc + ow  # through the last computed row's last window
    line = rows.reshape(-1)
    taps = [line[j * dw : j * dw + sw * (count - 1) + 1 : sw] for j in range(kw)]
    cols = buffers.get(("pool cols",), (images * per_image * wc,), x.dtype)
    calls.extend(_fold(ufunc, taps, cols[:count]))
    valid = cols.reshape(n, c, per_image, wc)[:, :, :oh, :ow]
    if divisor is None or np.ndim(divisor):
        # counts per window: divided in out, where numpy runs through each map in one loop (by
        # the read-out's rows of ow, 2.5-3x the time on inception_v2's 3 x 3 average pools)
        calls.append(functools.partial(np.copyto, out, valid))
        if divisor is not None:
            calls.append(functools.partial(np.divide, out, divisor, out=out))
    else:
        calls.append(functools.partial(np.divide, valid, divisor, out=out))
    return calls


def _loop_call(loops, out, x, g: _Geom, ufunc, fill, divisor):
    """The compiled pool (pool_loops.pool2d) of x into out: the folds of the numpy calls below in
    their order, padding taps folded in where those read a padding buffer and left out where
    they fold the edges of a same-size or stem pool again (the same bits, NaN and the sign of
    zero included), where it pays (``_loop_pays``)."""
    n, c, h, w = x.shape
    skip = _stem(g, x.shape) or (_same_size(g, x.shape) and not np.may_share_memory(out, x))
    # one number per window (a max pool's are not read): the loop compiles for one layout
    per_window = np.ascontiguousarray(
        np.broadcast_to(np.asarray(1 if divisor is None else divisor, x.dtype), g.out)
    )
    return functools.partial(
        loops.pool2d,
        x.reshape(n * c, h, w),
        out.reshape(n * c, *g.out),
        per_window,
        g.kernel,
        g.strides,
        g.dilations,
        g.begin,
        x.dtype.type(fill),
        ufunc is np.maximum,
        skip,
        divisor is not None,
    )


def _loop_pays(g: _Geom, ufunc) -> bool:
    """Whether the compiled pool beats the numpy calls (1 thread, CPU time): at a stride, for a
    max pool and for an average of more than 2 x 2 taps (3 x 3 stride 2 on 64 x 112 x 112: 0.47-0.54
    ms against 0.61); at stride 1 the numpy calls' flat folds over all channels win (192 x 28 x 28,
    3 x 3: 0.21 ms against 0.42), and a 2 x 2 average's division by window costs the loop what it
    saves (64 x 56 x 56: 0.11-0.14 ms against 0.09-0.11)."""
    return g.strides != (1, 1) and (ufunc is np.maximum or prod(g.kernel) > 4)


def _loop_may_write(out, x, g: _Geom) -> bool:
    """Whether the compiled pool may write out, C-contiguous like x: where out overlaps x (the
    memory plan puts a pool's smaller output where its input starts: emit/plan.py SHRINKS_OVER),
    each output row must end before the first input row that later rows still read (the loop
    writes an output row after reading its window's rows)."""
    if not out.flags.c_contiguous or out.dtype != x.dtype:
        return False
    if not np.may_share_memory(out, x):
        return True
    n, c, h, w = x.shape
    (oh, ow), sh, top = g.out, g.strides[0], g.begin[0]
    shift = (out.__array_interface__["data"][0] - x.__array_interface__["data"][0]) // x.itemsize
    oy = np.arange(oh, dtype=np.int64)
    next_row = np.where(oy + 1 < oh, np.clip((oy + 1) * sh - top, 0, h) * w, h * w)  # within the image
    for image in (0, n * c - 1):  # both sides are linear in the image's number
        if np.any(shift + image * oh * ow + (oy + 1) * ow > image * h * w + next_row):
            return False
    return True


def _stem(g: _Geom, x_shape) -> bool:
    """Whether a pool is the 3 x 3, stride 2 pool padded by 1 at the start that halves a map of
    even height and width (the stem of ResNet and ShuffleNet)."""
    h, w = x_shape[2:]
    return (
        g.kernel == (3, 3)
        and g.strides == (2, 2)
        and g.dilations == (1, 1)
        and g.begin == (1, 1)
        and h % 2 == 0
        and w % 2 == 0
        and g.out == (h // 2, w // 2)
    )


def _stem_pool_calls(out, x, ufunc, buffers, divisor) -> list:
    """A ``_stem`` pool with no padding buffer: output row i folds input rows 2i - 1, 2i, 2i + 1,
    so over the rows of all channels one after the other each tap is every other row of the whole
    tensor; the first row of each channel, whose window would start in the row before it (the
    previous channel's last), is folded again from its two rows. Then the same along the width,
    straight into out. The same folds in the same order as over a padding buffer holding the
    identity (the same bits), without filling one or reading out of it: ShuffleNet's 24 x 112 x 112
    max pool took 0.36 ms against 0.56. x is read only by the first fold: out may start where
    it does (emit/plan.py SHRINKS_OVER)."""
    n, c, h, w = x.shape
    images, oh, ow = n * c, h // 2, w // 2
    rows = buffers.get(("stem pool rows",), (images * oh, w), x.dtype)
    calls = _halving_fold(ufunc, x.reshape(images * h, w), rows)
    by_image = x.reshape(images, h, w)
    calls.append(
        functools.partial(ufunc, by_image[:, 0], by_image[:, 1], out=rows.reshape(images, oh, w)[:, 0])
    )
    calls += _halving_fold(ufunc, rows.reshape(-1), out.reshape(-1))
    calls.append(functools.partial(ufunc, rows[:, 0], rows[:, 1], out=out.reshape(images * oh, ow)[:, 0]))
    if divisor is not None:
        calls.append(functools.partial(np.divide, out, divisor, out=out))
    return calls


def _halving_fold(ufunc, a, acc) -> list:
    """acc[j] = a[2j - 1] ⊕ a[2j] ⊕ a[2j + 1] along the first axis for j >= 1 (acc[0] is left to
    the caller)."""
    m = acc.shape[0]
    return _fold(ufunc, [a[k : k + 2 * m - 3 : 2] for k in (1, 2, 3)], acc[1:])


def _same_size(g: _Geom, x_shape) -> bool:
    """Whether a pool keeps the map's size by padding (k - 1) / 2 on every side of an odd kernel,
    at stride and dilation 1 (GoogLeNet's 3 x 3 pools)."""
    return (
        g.strides == (1, 1)
        and g.dilations == (1, 1)
        and all(k % 2 for k in g.kernel)
        and g.begin == g.end == tuple(k // 2 for k in g.kernel)
        and g.out == tuple(x_shape[2:])
    )


def _same_size_pool_calls(out, x, g: _Geom, ufunc, buffers, divisor) -> list:
    """A same-size pool (``_same_size``) with no padding buffer: each fold runs flat over the
    rows of all channels of x (then over the columns of all rows) as if the map had no edges, and
    the rows (columns) within k // 2 of an edge, whose windows that read the neighbouring
    channel's rows (row's elements), are folded again from the taps inside the map. The last fold
    writes out itself: no copy into a padded buffer nor out of a wider one (on a 576 x 14 x 14
    3 x 3 average pool each of those two took the time of three flat folds)."""
    n, c, h, w = x.shape
    (kh, kw), images = g.kernel, n * c
    rows = buffers.get(("pool rows",), (images * h, w), x.dtype)
    return [
        *_edgeless_fold(ufunc, x.reshape(images, h, w), rows.reshape(images, h, w), kh),
        *_edgeless_fold(ufunc, rows.reshape(images * h, w, 1), out.reshape(images * h, w, 1), kw),
        *([functools.partial(np.divide, out, divisor, out=out)] if divisor is not None else []),
    ]


def _edgeless_fold(ufunc, source, acc, k: int) -> list:
    """``ufunc`` folded over windows of k along axis 1 of source (images, size, rest) into acc of
    its shape, padded by k // 2: flat over all images, then again from the taps inside the image
    for the elements within k // 2 of its edges (whose flat windows read the next image's)."""
    size, step = source.shape[1], prod(source.shape[2:])  # step: from one position to the next
    radius, line, flat = k // 2, source.reshape(-1), acc.reshape(-1)
    count = line.size - 2 * radius * step
    calls = []
    if count > 0:
        taps = [line[t * step : t * step + count] for t in range(k)]
        calls.extend(_fold(ufunc, taps, flat[radius * step : radius * step + count]))
    for i in sorted(set(range(min(radius, size))) | set(range(max(size - radius, 0), size))):
        taps = [source[:, i + t - radius] for t in range(k) if 0 <= i + t - radius < size]
        calls.extend(_fold(ufunc, taps, acc[:, i]))
    return calls


def _fold(ufunc, taps: list, acc) -> list:
    """The calls that fold ``ufunc`` over ``taps`` into ``acc``, in order."""
    if len(taps) == 1:
        return [functools.partial(np.copyto, acc, taps[0])]
    # out= as a keyword: numpy 2.4 deprecates maximum's positional output
    calls = [functools.partial(ufunc, taps[0], taps[1], out=acc)]
    calls.extend(functools.partial(ufunc, acc, tap, out=acc) for tap in taps[2:])
    return calls


class _PoolCall:
    """The prepared call of a 2-D float MaxPool (its Indices output omitted) or AveragePool of
    static shapes: its numpy calls (``_pool_calls``, then AveragePool's division by the window
    counts) made once per arena set when bound. Called unbound it keeps the calls it made for
    the last arrays it got, as ``_ConvCall`` does."""

    __slots__ = ("divisor", "dtype", "fill", "g", "last", "out_shape", "ufunc", "x_shape")

    def __init__(self, x_shape, dtype, g: _Geom, ufunc, divisor=None):
        self.x_shape, self.dtype, self.g, self.ufunc, self.divisor = (
            tuple(x_shape),
            np.dtype(dtype),
            g,
            ufunc,
            divisor,
        )
        self.fill = 0 if ufunc is np.add else _lowest(dtype)
        self.out_shape = self.x_shape[:2] + g.out
        self.last = None  # (out, x, calls): one tuple, replaced whole (threads)

    def calls(self, out, x, buffers) -> tuple:
        return tuple(_pool_calls(out, x, self.g, self.ufunc, self.fill, buffers, self.divisor))

    def _check(self, out, x) -> None:
        if x.shape != self.x_shape or out.shape != self.out_shape:
            raise TypeError("not the declared shapes")
        if x.dtype != self.dtype or out.dtype != self.dtype:
            raise TypeError("not the declared types")

    def __call__(self, out, x):
        last = self.last
        if last is None or last[0] is not out or last[1] is not x:
            self._check(out, x)
            last = self.last = (out, x, self.calls(out, x, _arena_buffers(out)))
        _run_calls(last[2])

    def bind(self, out, x):
        self._check(out, x)
        return functools.partial(_run_calls, self.calls(out, x, _arena_buffers(out)))


def _pool_spec(op: str, attrs, inputs, output) -> tuple | None:
    """(dtype, input shape, geometry) of a pool that a prepared call computes: 2-D, float32 or
    float64, the output of the input's dtype and of the shape the geometry gives; else None."""
    if len(inputs) != 1 or inputs[0] is None or output is None:
        return None
    (dtype, x_shape), (out_dtype, out_shape) = inputs[0], output
    if dtype not in (np.float32, np.float64) or out_dtype != dtype or len(x_shape) != 4:
        return None
    try:
        g = _geometry(
            op,
            x_shape,
            attrs["kernel_shape"],
            attrs["auto_pad"],
            attrs["dilations"],
            attrs["pads"],
            attrs["strides"],
            attrs["ceil_mode"],
        )
    except (OffloadError, ValueError, TypeError):  # the kernel raises the error a user sees
        return None
    if tuple(x_shape[:2]) + g.out != tuple(out_shape):
        return None
    return dtype, x_shape, g


@prepared("MaxPool")
def _max_pool_prepared(attrs, inputs, output):
    spec = _pool_spec("MaxPool", attrs, inputs, output)
    if spec is None or attrs["storage_order"] not in (0, 1):
        return None
    dtype, x_shape, g = spec
    return _PoolCall(x_shape, dtype, g, np.maximum)


@prepared("AveragePool")
def _average_pool_prepared(attrs, inputs, output):
    spec = _pool_spec("AveragePool", attrs, inputs, output)
    if spec is None:
        return None
    dtype, x_shape, g = spec
    divisor = _pool_divisor(g, x_shape, attrs["count_include_pad"], attrs["auto_pad"], attrs["pads"], dtype)
    return _PoolCall(x_shape, dtype, g, np.add, divisor)


@kernel("MaxPool")
def max_pool(ctx, X, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order, strides):
    if storage_order not in (0, 1):
        raise unsupported("MaxPool", f"storage_order={storage_order}")
    x = X if X.dtype.kind in "fiu" else widened(X)
    g = _geometry("MaxPool", x.shape, kernel_shape, auto_pad, dilations, pads, strides, ceil_mode)
    out = out_for(ctx, 0, x.shape[:2] + g.out, x.dtype)
    if x.ndim == 4 and x.dtype in (np.float32, np.float64):  # as the prepared call computes it
        if out is None:
            out = np.empty(x.shape[:2] + g.out, x.dtype)
        _run_calls(
            _pool_calls(out, np.ascontiguousarray(x), g, np.maximum, _lowest(x.dtype), _thread_buffers())
        )
        y = out
    else:
        y = _fold_windows(x, g, np.maximum, _lowest(x.dtype), out).astype(X.dtype, copy=False)
    if not ctx.output_wanted(1):
        return y
    win = _windows(x, g, _lowest(x.dtype))
    check_result(win.shape, x.dtype, "MaxPool (the windows the indices are read from)")  # reshape copies
    first = win.reshape(win.shape[: 2 + len(g.out)] + (-1,)).argmax(-1)
    return y, _max_indices(first, g, x.shape, storage_order)


def _window_counts(g: _Geom, size, pad_end=None):
    """How many elements each window (*out) covers: of the input, or with ``pad_end`` also of
    the explicit padding (begin and these end pads)."""
    count = np.ones((), np.int64)
    for i in range(len(size)):
        at = (np.arange(g.out[i]) * g.strides[i] - g.begin[i])[:, None] + np.arange(
            g.kernel[i]
        ) * g.dilations[i]
        lo, hi = (0, size[i]) if pad_end is None else (-g.begin[i], size[i] + pad_end[i])
        count = np.multiply.outer(count, ((at >= lo) & (at < hi)).sum(1))
    return count


def _pool_divisor(g: _Geom, x_shape, count_include_pad, auto_pad, pads, dtype):
    """What AveragePool divides its sums by: the window counts (*out) in the sums' dtype, or one
    number of it where every window counts as many elements. The kernel and the prepared call
    divide by the same, so their results agree bit for bit. Measured on 576 x 14 x 14 float32
    sums: by int64 counts 1.9x the time of by float32 ones (numpy casts them element by element
    into a float64 quotient), by one float32 number 0.6x."""
    pad_end = None
    if count_include_pad:
        # Padding that ceil_mode adds beyond the explicit pads never counts.
        size = tuple(x_shape[2:])
        _, pad_end = _pads("AveragePool", auto_pad, pads, size, g.kernel, g.strides, g.dilations)
    return _divisor_of(g, tuple(x_shape[2:]), pad_end, np.dtype(dtype))


@functools.lru_cache(maxsize=256)
def _divisor_of(g: _Geom, size: tuple, pad_end: tuple | None, dtype: np.dtype):
    counts = _window_counts(g, size, pad_end)
    if counts.size and counts.min() == counts.max():
        return dtype.type(counts.flat[0])
    divisor = counts.astype(dtype)
    divisor.flags.writeable = False  # shared by every call of this geometry
    return divisor


@kernel("AveragePool")
def average_pool(ctx, X, *, auto_pad, ceil_mode, count_include_pad, dilations, kernel_shape, pads, strides):
    x = widened(X)
    g = _geometry("AveragePool", x.shape, kernel_shape, auto_pad, dilations, pads, strides, ceil_mode)
    out = out_for(ctx, 0, x.shape[:2] + g.out, x.dtype)
    if x.ndim == 4 and x.dtype in (np.float32, np.float64):  # as the prepared call computes it
        y = out if out is not None else np.empty(x.shape[:2] + g.out, x.dtype)
        divisor = _pool_divisor(g, x.shape, count_include_pad, auto_pad, pads, x.dtype)
        _run_calls(_pool_calls(y, np.ascontiguousarray(x), g, np.add, 0, _thread_buffers(), divisor))
        return y.astype(X.dtype, copy=False)
    sums = _fold_windows(x, g, np.add, 0, out)  # a new array, or out
    divisor = _pool_divisor(g, x.shape, count_include_pad, auto_pad, pads, sums.dtype)
    return np.divide(sums, divisor, out=sums).astype(X.dtype, copy=False)


@kernel("LpPool")
def lp_pool(ctx, X, *, auto_pad, ceil_mode, dilations, kernel_shape, p, pads, strides):
    x = widened(X)
    g = _geometry("LpPool", x.shape, kernel_shape, auto_pad, dilations, pads, strides, ceil_mode)
    win = _windows(np.abs(x), g)
    check_result(win.shape, x.dtype, "LpPool (its windows' powers)")  # win**p is one array of them all
    return (np.sum(win**p, axis=_window_axes(win)) ** (1.0 / p)).astype(X.dtype, copy=False)


def _spatial_axes(X) -> tuple:
    return tuple(range(2, X.ndim))


def _global_average_passes(out, x):
    """GlobalAveragePool of C-contiguous x into out: a sum over each channel's pixels (numpy's
    pairwise sum), then one division; 2 numpy calls however small the map (squeeze-excite
    blocks pool 7 x 7 to 28 x 28 maps of 16-576 channels)."""
    n, c = x.shape[:2]
    sums = out.reshape(n, c)
    rows = x.reshape(n, c, -1)
    count = out.dtype.type(rows.shape[2])

    def run():
        np.add.reduce(rows, 2, None, sums)
        np.divide(sums, count, sums)

    return run


@kernel("GlobalAveragePool")
def global_average_pool(ctx, X):
    x = np.ascontiguousarray(widened(X))
    shape = x.shape[:2] + (1,) * (x.ndim - 2)
    out = out_for(ctx, 0, shape, x.dtype)
    if out is None or np.may_share_memory(out, x):
        out = np.empty(shape, x.dtype)
    _global_average_passes(out, x)()
    return out.astype(X.dtype, copy=False)


class _GlobalAverageCall:
    __slots__ = ()

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape[:2] != out.shape[:2] or np.may_share_memory(out, x):
            raise TypeError("not the declared type")  # (or out in x's memory: the kernel copes)
        _global_average_passes(out, x)()

    def bind(self, out, x):
        if np.may_share_memory(out, x):
            return functools.partial(_by_copy, out, x)
        return _global_average_passes(out, x)


def _by_copy(out, x):
    _global_average_passes(out, x.copy())()


@prepared("GlobalAveragePool")
def _global_average_prepared(attrs, inputs, output):
    if len(inputs) != 1 or inputs[0] is None or output is None:
        return None
    (dtype, shape), (out_dtype, out_shape) = inputs[0], output
    if dtype not in (np.float32, np.float64) or out_dtype != dtype or len(shape) < 3:
        return None
    if tuple(out_shape) != tuple(shape[:2]) + (1,) * (len(shape) - 2):
        return None
    return _GlobalAverageCall()


@kernel("GlobalMaxPool")
def global_max_pool(ctx, X):
    return X.max(axis=_spatial_axes(X), keepdims=True)


@kernel("GlobalLpPool")
def global_lp_pool(ctx, X, *, p):
    s = np.sum(np.abs(widened(X)) ** p, axis=_spatial_axes(X), keepdims=True)
    return (s ** (1.0 / p)).astype(X.dtype, copy=False)


@kernel("MaxUnpool")
def max_unpool(ctx, X, I, output_shape=None, *, kernel_shape, pads, strides):
    nd = X.ndim - 2
    s = _ints(strides, nd, 1)
    p = _ints(pads, 2 * nd, 0)
    shape = X.shape[:2] + tuple(
        (i - 1) * s[a] + int(k) - p[a] - p[nd + a] for a, (i, k) in enumerate(zip(X.shape[2:], kernel_shape))
    )
    index = np.asarray(I, np.int64).reshape(-1)
    if output_shape is not None:
        # As ONNX's cases have it, indices number the unpadded result's elements; a larger
        # output_shape keeps their coordinates and adds zeros at the ends.
        index = np.ravel_multi_index(np.unravel_index(index, shape), tuple(int(v) for v in output_shape))
        shape = tuple(int(v) for v in output_shape)
    y = np.zeros(prod(shape), X.dtype)
    y[index] = X.reshape(-1)
    return y.reshape(shape)
