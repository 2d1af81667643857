"""Compiled loops (numba) for 2-D MaxPool and AveragePool (``pool2d``), re-exported by loops.py
and reached through ``_util.compiled_loops()`` like the others.

numpy pools a map in one pass over the whole tensor per tap (``pool._pool_calls``: for 3 x 3,
two or three folds along the height, then along the width, each reading and writing a tensor
the size of the map): 2-4x onnxruntime's time on the max pools after a convolution stem.
``pool2d`` folds one output row at a time: the rows of its window into a row buffer that stays
in the L1 cache, then the columns of each output window from it, then the division of the
average, so that the map is read once and the output written once. The loops index flat
arrays by unsigned offsets: numba checks a signed index for wraparound, which keeps the
compiler from vectorizing the loop, and a view per row costs two reference count updates;
either took more time than the folds of a short row (on 32 x 450 x 60, 2 x 2 stride 2: 1.0 ms
with views, 0.18 with unsigned offsets).

The results are the numpy folds' bit for bit: the same operations in the same order (the rows
of a window one after the other, then its columns), numpy's maximum (``_max``), sums that add
the padding's zeros where the numpy folds read a padding buffer (``skip`` False) and leave the
taps outside the map out where they fold edges from the taps inside it (``skip`` True: the
same-size and stem pools).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _max(a, b):  # pragma: no cover - compiled
    """numpy's maximum of a and b: a where a > b or a is NaN, else b (of equal values b, of a
    NaN and a number the NaN). numba's np.maximum(b, a) is that, except that of two NaNs it
    gives b's bits (a NaN still), and unlike a ternary or a select written out here it
    vectorizes (0.12 ns a float against 0.75)."""
    return np.maximum(b, a)


@njit(cache=True, nogil=True, inline="always")
def _op(a, b, is_max):  # pragma: no cover - compiled
    return _max(a, b) if is_max else a + b


@njit(cache=True, nogil=True, inline="always")
def _run(acc, at, src, s0, s1, s2, n, count, step, is_max):  # pragma: no cover - compiled
    """acc[at + t] = src[s0 + i] (n 1), src[s0 + i] ⊕ src[s1 + i] (2) or that ⊕ src[s2 + i]
    (3), i = t * step, for t < count; every offset unsigned."""
    if n == 1:
        for t in range(count):
            acc[at + t] = src[s0 + t * step]
    elif n == 2:
        if is_max:
            for t in range(count):
                acc[at + t] = _max(src[s0 + t * step], src[s1 + t * step])
        else:
            for t in range(count):
                acc[at + t] = src[s0 + t * step] + src[s1 + t * step]
    elif is_max:
        for t in range(count):
            acc[at + t] = _max(_max(src[s0 + t * step], src[s1 + t * step]), src[s2 + t * step])
    else:
        for t in range(count):
            acc[at + t] = (src[s0 + t * step] + src[s1 + t * step]) + src[s2 + t * step]


@njit(cache=True, nogil=True, inline="always")
def _run_more(acc, at, src, s, count, step, is_max):  # pragma: no cover - compiled
    """acc[at + t] = acc[at + t] ⊕ src[s + t * step] for t < count."""
    if is_max:
        for t in range(count):
            acc[at + t] = _max(acc[at + t], src[s + t * step])
    else:
        for t in range(count):
            acc[at + t] = acc[at + t] + src[s + t * step]


@njit(cache=True, nogil=True, inline="always")
def _fold(acc, at, src, base, starts, n, count, step, is_max):  # pragma: no cover - compiled
    """acc[at + t] = the fold of src[base + starts[i] + t * step] over i < n in order, t < count:
    the first three taps in one loop, each further one in one more; strides 1 and 2 as
    constants."""
    one = np.uint64(1)
    s0 = base + np.uint64(starts[0])
    s1 = base + np.uint64(starts[min(1, n - 1)])
    s2 = base + np.uint64(starts[min(2, n - 1)])
    m = min(n, 3)
    if step == 1:
        _run(acc, at, src, s0, s1, s2, m, count, one, is_max)
    elif step == 2:
        _run(acc, at, src, s0, s1, s2, m, count, np.uint64(2), is_max)
    else:
        _run(acc, at, src, s0, s1, s2, m, count, np.uint64(step), is_max)
    for i in range(3, n):
        _run_more(acc, at, src, base + np.uint64(starts[i]), count, np.uint64(step), is_max)


@njit(cache=True, nogil=True, inline="always")
def _edge(dst, at, rows, first_col, end_col, kw, sw, dw, left, fill, is_max, skip):  # pragma: no cover
    """dst[at + ox] for first_col <= ox < end_col: columns whose window reaches past the map."""
    w = rows.shape[0]
    for ox in range(first_col, end_col):
        started = False
        for kx in range(kw):
            ix = ox * sw - left + kx * dw
            if 0 <= ix < w:
                v = rows[ix]
            elif skip:
                continue
            else:
                v = fill
            dst[at + ox] = _op(dst[at + ox], v, is_max) if started else v
            started = True


@njit(cache=True, nogil=True)
def pool2d(
    x, out, divisor, kernel, strides, dilations, begin, fill, is_max, skip, divide
):  # pragma: no cover
    """out (images, OH, OW) = the max (``is_max``) or sum of each window of x (images, H, W),
    divided by divisor (OH, OW) where ``divide``; windows of ``kernel`` taps at ``strides`` and
    ``dilations`` starting ``begin`` rows and columns before the map. A tap outside the map is
    ``fill`` (the padding's value) or, where ``skip``, left out. All C-contiguous; out may
    overlap x where each output row is written after the input rows still to be read
    (``pool._loop_may_write``)."""
    images, h, w = x.shape
    oh, ow = out.shape[1], out.shape[2]
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    top, left = begin
    src, dst, div = x.reshape(-1), out.reshape(-1), divisor.reshape(-1)
    rows = np.empty(w, x.dtype)  # the window's rows folded
    # the output columns whose taps all lie inside the map: one loop over them
    lo = min(ow, max(0, -(-left // sw)))
    hi = max(lo, min(ow, (w - 1 + left - (kw - 1) * dw) // sw + 1))
    row_at = np.empty(kh, np.int64)
    col_at = np.empty(kw, np.int64)
    for kx in range(kw):
        col_at[kx] = lo * sw - left + kx * dw
    zero = np.uint64(0)
    for img in range(images):
        for oy in range(oh):
            taps = 0  # the rows of the window to fold: offsets in the image, -1 for padding
            inside = True
            for ky in range(kh):
                iy = oy * sh - top + ky * dh
                if 0 <= iy < h:
                    row_at[taps] = iy * w
                    taps += 1
                elif not skip:
                    row_at[taps] = -1
                    taps += 1
                    inside = False
            base = img * h * w
            if inside:
                _fold(rows, zero, src, np.uint64(base), row_at, taps, np.uint64(w), 1, is_max)
            else:  # a padding row among them: folded in order as a row of fill
                for i in range(taps):
                    for t in range(w):
                        v = src[base + row_at[i] + t] if row_at[i] >= 0 else fill
                        rows[t] = v if i == 0 else _op(rows[t], v, is_max)
            at = (img * oh + oy) * ow
            if hi > lo:
                _fold(dst, np.uint64(at + lo), rows, zero, col_at, kw, np.uint64(hi - lo), sw, is_max)
            _edge(dst, at, rows, 0, lo, kw, sw, dw, left, fill, is_max, skip)
            _edge(dst, at, rows, hi, ow, kw, sw, dw, left, fill, is_max, skip)
            if divide:
                r = np.uint64(oy * ow)
                a = np.uint64(at)
                for t in range(np.uint64(ow)):
                    dst[a + t] = dst[a + t] / div[r + t]
