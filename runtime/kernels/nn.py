"""Convolution, pooling and sampling kernels: the Conv family, pools, RoI ops, GridSample, LRN.

Convolutions are products of the weights with the input's windows by BLAS (``_conv_product``): a
1 x 1 kernel with stride 1 and no padding takes the image itself as the [C, pixels] operand; other
kernels copy the windows into a column matrix (im2col) in a scratch buffer reused across calls.
Pools reduce the window view of the padded input.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from math import prod
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from offload.errors import OffloadError, ShapeError

from . import kernel, prepared
from ._util import compiled_loops as _loops
from ._util import out_for, unsupported
from .elementwise import _CLIP, _hard_passes
from .linalg import saturate, widened

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
    return _geometry_of(*key, auto_pad, ceil_mode)


@functools.lru_cache(maxsize=1024)
def _geometry_of(op, x_shape, kernel, dilations, pads, strides, auto_pad, ceil_mode) -> _Geom:
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


# ---------------------------------------------------------------------------- convolution


def _grouped_product(cols, w, group: int, dest=None):
    """Convolution sums of windows cols (N, C, *out, *kernel) with w (M, C/group, *kernel): (N, M, *out).

    The im2col matrix is laid out (G, C/G·kernel, N·out) so that copying it reads rows of the
    input, and the product W·cols comes out in NCHW order without a transpose for N = 1.
    """
    n, c = cols.shape[:2]
    nd = (cols.ndim - 2) // 2
    out = cols.shape[2 : 2 + nd]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        raise ShapeError(f"input with {c} channels, weights of shape {w.shape} and group={group} do not fit")
    cg, mg = c // group, m // group
    a = cols.reshape((n, group, cg) + cols.shape[2:])
    out_axes = tuple(range(3, 3 + nd))
    kernel_axes = tuple(range(3 + nd, 3 + 2 * nd))
    a = a.transpose((1, 2, *kernel_axes, 0, *out_axes)).reshape(group, cg * prod(w.shape[2:]), n * prod(out))
    if dest is not None and n == 1:  # (G, M/G, out) is the planned (1, M, *out) itself
        np.matmul(w.reshape(group, mg, -1), a, out=dest.reshape(group, mg, -1))
        return dest
    y = np.matmul(w.reshape(group, mg, -1), a)  # (G, M/G, N*out)
    return y.reshape(group, mg, n, prod(out)).transpose(2, 0, 1, 3).reshape((n, m) + out)


_SCRATCH = threading.local()  # each thread's column buffer (kernels may run on several threads)
# Column matrices up to this size stay allocated between calls; a larger one is allocated per
# call (its product takes far longer than the allocation, and it would stay held).
SCRATCH_BYTES = 64 << 20


def _scratch(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` in this thread's reused buffer (fresh when large)."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if nbytes > SCRATCH_BYTES:
        return np.empty(shape, dtype)
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _SCRATCH.buf = np.empty(max(nbytes, 1 << 20), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


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


def _conv_product(x, w, g: _Geom, group: int, dest=None):
    """Convolution sums of x (N, C, *size) with w (M, C/group, *kernel): (N, M, *out), into
    ``dest`` when given.

    Per image, one BLAS product per group, (M/G, C/G·kernel) @ (C/G·kernel, out), written
    straight into the image's rows of the result. A depthwise conv (one channel per group) keeps
    the batched form over a window view: it measured faster than a loop over the kernel offsets
    (9 multiply-adds of the whole image) and than einsum on ShuffleNet's depthwise layers."""
    n, c = x.shape[:2]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        raise ShapeError(f"input with {c} channels, weights of shape {w.shape} and group={group} do not fit")
    cg, mg = c // group, m // group
    if cg == 1:
        return _grouped_product(_windows(x, g), w, group, dest)
    out = dest if dest is not None else np.empty((n, m) + g.out, np.result_type(x, w))
    if dest is not None and np.may_share_memory(dest, x):
        x = x.copy()  # the planned output may reuse the input's memory: products read it after writes
    size, pixels = prod(g.kernel) * cg, prod(g.out)
    padded = any(g.begin) or any(g.end)
    direct = size == cg and all(s == 1 for s in g.strides) and not padded  # 1 x 1: the image itself
    xp = _padded(x, g) if padded else x
    weights = w.reshape(group, mg, size)
    cols = None if direct else _scratch((c,) + g.kernel + g.out, out.dtype)
    for i in range(n):
        if direct:
            operand = x[i].reshape(group, size, pixels)
        else:
            np.copyto(cols, _columns(xp[i], g))
            operand = cols.reshape(group, size, pixels)
        np.matmul(weights, operand, out=out[i].reshape(group, mg, pixels))
    return out


# ---------------------------------------------------------------------------- convolution plans
#
# A 2-D convolution's shapes fix everything but the arithmetic: which path computes it, the
# geometry of its windows, the views its numpy calls read and write. ``_ConvPlan`` works these
# out once per shape (at a method's load for a prepared Conv, cached for the kernel) and lists the
# convolution as numpy calls with their operands fixed (``functools.partial``), which a bound
# call runs back to back. Both the kernel and the prepared call run these same calls, so their
# results agree bit for bit.

# A depthwise conv whose input has at most _LAST_INPUT_PIXELS pixels runs channels-last (``last``),
# the others by rows of the padded image, two passes a tap (``rows``). Measured on the depthwise
# layers of MobileNetV2, MobileNetV3-Small and ShuffleNetV2 (1 thread, time last / rows, several
# runs on a shared machine): 3 x 3 on 56 x 56 inputs 0.70-0.82 at stride 2, 0.81-1.10 with 144
# channels at stride 1, 28 x 28 0.48-0.68, 14 x 14 and 7 x 7 0.30-0.59, 5 x 5 0.24-0.48; on 112 x
# 112 inputs the transposing copies into channels-last cost more than the einsum saves: 32
# channels 0.97-1.41, 96 at stride 2 1.49-2.46, 16 at stride 2 1.22-1.33.
_LAST_INPUT_PIXELS = 64 * 64
_LAST_OUTPUT_PIXELS = 8 * 8  # the direct path's outputs this small: loops.depthwise_last
_COPY_PIXELS = 256  # the last path copies its sums out by blocks of rows of about this many pixels
# The rows path works through the channels in chunks whose accumulator takes about this many
# bytes, so that a chunk's padded input, accumulator and term stay in the core's L2 cache across
# the kernel's taps: 96 x 112 x 112 stride 2 0.50x the time of one chunk, 144 x 56 x 56 0.84x.
_CHUNK_BYTES = 512 << 10


class _ConvPlan:
    """One 2-D convolution of fixed shapes and dtype: its geometry, its path, and the numpy calls
    that compute it (``calls``). The paths:

    - ``pointwise``: a 1 x 1 kernel, stride 1, no padding: per image and group one BLAS product
      with the image itself, (M/G, C/G) @ (C/G, pixels), into the output's rows.
    - ``direct``: depthwise (one input and one output channel per group), 2-D, where the compiled
      loops are there (``_loops``: numba, not ``OFFLOAD_JIT=0``): ``loops.depthwise`` per image,
      one channel at a time with its padded stride phases and sums in cache, by chunks of
      channels when an epilogue follows (``loops.depthwise_last``, channels-last, for outputs of
      at most 8 x 8). Each output is the rows path's multiplies and adds in the same order, so
      its bits are the rows path's. MobileNetV2's large layers at 0.13-0.15 ns a multiply-add
      at stride 1 in isolation, against the einsum's 0.19 (0.3 in a run) and its copies
      (docs/cpu.md).
    - ``rows``: depthwise on large maps, where the compiled loops are not. The padded
      input is split into stride phases (phase (a, b) holds padded[a::sh, b::sw]; one phase at
      stride 1), so that every tap reads one phase at stride 1: per tap one multiply and one add of
      whole rows of OH x Wph contiguous floats per channel; the Wph - OW columns past each output
      row are computed and dropped. The bias is added on the copy out of the accumulator.
    - ``last``: depthwise on small maps, where the compiled loops are not, channels-last: the
      padded image's stride phases as (Hph, Wph, C) (``_phases_last``), and per phase one
      einsum of the (taps down, taps across, OH, OW * C) view of the taps that read it with
      their weights repeated along OW, which sums those taps in the weights' order in loops of
      OW * C (the taps of one phase step evenly through it; the partial sums of phases after
      the first are added). 0.3-0.8x the time of one einsum over all taps with loops of C, the
      same bits at stride 1. The bias is added channels-last, then the sums are copied out.
    - ``taps``: one group at stride 1 with at most half as many output as input channels
      (DenseNet's 128 -> 32 3 x 3 convs): the padded image's rows of Wp floats read as one
      matrix (C, Hp * Wp), one BLAS product by all the taps' weights at once, (taps * M, C) @
      (C, Hp * Wp), then per output the taps' products summed in the weights' order, each read
      at its tap's offset in the flat rows (the Wp - OW columns past each output row computed
      and dropped), the bias added on the copy out. No column matrix: its C x kernel rows are
      written and read once, the taps' products T x M rows, at most half as many.
    - ``columns``: everything else, im2col: the windows copied into a column matrix (C/G x
      kernel, pixels), then one BLAS product per image and group.

    Padding is a buffer whose border is zeroed once and never written (only its interior is), so
    convolutions of the same padded geometry share it (``_Buffers``).
    """

    def __init__(self, x_shape, w_shape, dtype, g: _Geom, group: int):
        n, c = x_shape[:2]
        m = w_shape[0]
        if group < 1 or c % group or m % group or w_shape[1] * group != c:
            raise ShapeError(
                f"input with {c} channels, weights of shape {tuple(w_shape)} and group={group} do not fit"
            )
        self.x_shape, self.w_shape, self.dtype, self.g, self.group = (
            tuple(x_shape),
            tuple(w_shape),
            np.dtype(dtype),
            g,
            group,
        )
        self.out_shape = (n, m) + g.out
        cg, mg = c // group, m // group
        padded = any(g.begin) or any(g.end)
        if cg == 1 and mg == 1:
            if len(g.kernel) == 2 and _loops() is not None:
                self.path = "direct"
            else:
                self.path = "last" if prod(x_shape[2:]) <= _LAST_INPUT_PIXELS else "rows"
        elif g.kernel == (1, 1) and g.strides == (1, 1) and not padded:
            self.path = "pointwise"
        elif group == 1 and g.strides == (1, 1) and 2 * m <= c and len(g.kernel) == 2:
            self.path = "taps"
        else:
            self.path = "columns"

    def calls(self, out, x, w, b, buffers, finish=None) -> list:
        """The calls that write the convolution of x with w (and bias b, or None) into out, all
        of the plan's shapes and dtype; ``buffers`` gives the scratch arrays (``_Buffers``).
        ``finish(part)``, when given, makes the calls of an elementwise op applied in place to
        a part of out once it holds its sums and bias (``_Epilogue``): the rows path finishes
        each chunk of channels while it is in cache, the others each image or all of out."""
        if b is not None and b.shape != (self.w_shape[0],):  # the compiled loops index it unchecked
            raise ShapeError(f"Conv: a bias of shape {b.shape} for {self.w_shape[0]} output channels")
        shared = np.may_share_memory(out, x)  # the planned output may reuse the input's memory
        if self.path in ("rows", "last", "direct"):  # these copy all the input before writing
            return getattr(self, self.path)(out, x, w, b, buffers, shared, finish)
        calls = []
        if shared:
            copy = buffers.get(("input",), self.x_shape, self.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        calls += getattr(self, self.path)(out, x, w, b, buffers)
        return calls + (finish(out) if finish is not None else [])

    def bias_in_product(self, bias: bool) -> bool:
        """Whether the bias is a column of the weights times a row of ones under the operand, in
        the product, rather than a pass over the output after it: for one group, on the columns
        path (its column matrix is copied anyway; the row of ones stays) and on the pointwise
        path with fewer input than output channels (MobileNets' expanding convs), where copying
        the input above a row of ones costs less than a pass over the output (24 -> 144
        channels on 56 x 56: 452 -> 359 us). The bias is then summed inside the product, so the
        plan's results differ from a product and an add in the last bits, the same in the
        kernel and the prepared call."""
        if not bias or self.group != 1:
            return False
        return self.path == "columns" or (self.path == "pointwise" and self.x_shape[1] < self.w_shape[0])

    def pointwise(self, out, x, w, b, buffers) -> list:
        n, c = self.x_shape[:2]
        m, group = self.w_shape[0], self.group
        pixels = prod(self.g.out)
        if self.bias_in_product(b is not None):
            calls = []
            weights = _with_bias(w.reshape(m, c), b, calls)
            operand = buffers.get(("ones below",), (c + 1, pixels), self.dtype, fill=1)
            for i in range(n):
                calls.append(functools.partial(np.copyto, operand[:c], x[i].reshape(c, pixels)))
                calls.append(functools.partial(np.matmul, weights, operand, out[i].reshape(m, pixels)))
            return calls
        if group == 1:
            weights = w.reshape(m, c)
            images = x.reshape(n, c, pixels)
            results = out.reshape(n, m, pixels)
        else:
            weights = w.reshape(group, m // group, c // group)
            images = x.reshape(n, group, c // group, pixels)
            results = out.reshape(n, group, m // group, pixels)
        calls = [functools.partial(np.matmul, weights, images[i], results[i]) for i in range(n)]
        if b is not None:
            calls.append(functools.partial(np.add, out, b.reshape(1, m, 1, 1), out))
        return calls

    def taps(self, out, x, w, b, buffers) -> list:
        g = self.g
        n, c, h, wd = self.x_shape
        m = self.w_shape[0]
        (kh, kw), (dh, dw), (oh, ow) = g.kernel, g.dilations, g.out
        hp, wp = h + g.begin[0] + g.end[0], wd + g.begin[1] + g.end[1]
        count = kh * kw
        calls = []
        # the taps' weights stacked, (kh, kw, M, C) -> (taps * M, C), in the weights' order
        weights = _weights_as(w.transpose(2, 3, 0, 1), calls).reshape(count * m, c)
        # rows of the last taps read up to (kw - 1) * dw floats past the padded image
        flat = buffers.get(("taps padded", g.begin, g.end, (h, wd)), (c, hp * wp + (kw - 1) * dw), self.dtype)
        padded = flat[:, : hp * wp].reshape(c, hp, wp)
        products = buffers.get(("tap products",), (count, m, hp * wp + (kw - 1) * dw), self.dtype)
        acc = buffers.get(("taps acc",), (m, oh * wp), self.dtype)
        result = acc.reshape(m, oh, wp)[:, :, :ow]
        bias = None if b is None else b.reshape(m, 1, 1)
        interior = padded[:, g.begin[0] : g.begin[0] + h, g.begin[1] : g.begin[1] + wd]
        stacked = products.reshape(count * m, -1)[:, : hp * wp]
        for i in range(n):
            calls.append(functools.partial(np.copyto, interior, x[i]))
            calls.append(functools.partial(np.matmul, weights, flat[:, : hp * wp], stacked))
            for k, (ki, kj) in enumerate(np.ndindex(kh, kw)):
                at = ki * dh * wp + kj * dw
                term = products[k, :, at : at + oh * wp]
                if k == 0:
                    first = term
                elif k == 1:
                    calls.append(functools.partial(np.add, first, term, acc))
                else:
                    calls.append(functools.partial(np.add, acc, term, acc))
            if count == 1:  # a 1 x 1 kernel on a padded image
                calls.append(functools.partial(np.copyto, acc, first))
            if bias is None:
                calls.append(functools.partial(np.copyto, out[i], result))
            else:
                calls.append(functools.partial(np.add, result, bias, out[i]))
        return calls

    def columns(self, out, x, w, b, buffers) -> list:
        g, group = self.g, self.group
        n, c = self.x_shape[:2]
        m = self.w_shape[0]
        size, pixels = prod(g.kernel) * (c // group), prod(g.out)
        calls = []
        biased = self.bias_in_product(b is not None)
        if biased:  # one group: the column matrix's rows, then a row of ones
            weights = _with_bias(w.reshape(m, size), b, calls).reshape(1, m, size + 1)
            operand = buffers.get(("ones below",), (size + 1, pixels), self.dtype, fill=1)
            cols = operand[:size].reshape((c,) + g.kernel + g.out)
            operand = operand.reshape(1, size + 1, pixels)
        else:
            weights = w.reshape(group, m // group, size)
            cols = buffers.get(("columns",), (c,) + g.kernel + g.out, self.dtype)
            operand = cols.reshape(group, size, pixels)
        loops = _loops() if len(g.kernel) == 2 else None
        (sh, sw), (dh, dw) = g.strides, g.dilations
        for i in range(n):
            if loops is not None:  # the windows straight from the image, one pass
                calls.append(
                    functools.partial(loops.im2col, x[i], cols, sh, sw, g.begin[0], g.begin[1], dh, dw)
                )
            elif g.strides == (1, 1):
                if any(g.begin) or any(g.end):
                    image = self._padded(x[i], buffers, calls)
                else:
                    image = x[i]
                calls.append(functools.partial(np.copyto, cols, _columns(image, g)))
            else:
                phases = self._phases(x[i], buffers, calls)
                for (ki, kj), view in zip(np.ndindex(*g.kernel), self._phase_taps(phases)):
                    calls.append(functools.partial(np.copyto, cols[:, ki, kj], view))
            calls.append(
                functools.partial(np.matmul, weights, operand, out[i].reshape(group, m // group, pixels))
            )
        if b is not None and not biased:
            calls.append(functools.partial(np.add, out, b.reshape(1, m, 1, 1), out))
        return calls

    def direct(self, out, x, w, b, buffers, shared, finish) -> list:
        g = self.g
        n, c = self.x_shape[:2]
        (oh, ow), (sh, sw), (dh, dw) = g.out, g.strides, g.dilations
        # the same bits either way: channels-last where the output is too small for long loops
        loops = _loops()
        depthwise = loops.depthwise_last if oh * ow <= _LAST_OUTPUT_PIXELS else loops.depthwise
        calls = []
        if shared:  # the output may be written over input channels not read yet
            copy = buffers.get(("input",), self.x_shape, self.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        weights = w.reshape((c,) + g.kernel)  # a view: read at every run, as x is
        bias = np.empty(0, self.dtype) if b is None else b
        # with an epilogue, by chunks of channels whose output stays in cache for it
        step = c if finish is None else max(1, _CHUNK_BYTES // (oh * ow * self.dtype.itemsize))
        for i in range(n):
            for lo in range(0, c, step):
                ch = slice(lo, min(c, lo + step))
                part = out[i, ch]
                calls.append(
                    functools.partial(
                        depthwise,
                        x[i, ch],
                        weights[ch],
                        bias[ch],
                        part,
                        sh,
                        sw,
                        g.begin[0],
                        g.begin[1],
                        dh,
                        dw,
                    )
                )
                if finish is not None:
                    calls.extend(finish(part))
        return calls

    def rows(self, out, x, w, b, buffers, shared, finish) -> list:
        g = self.g
        n, c = self.x_shape[:2]
        (oh, ow), taps = g.out, prod(g.kernel)
        calls = []
        coef = _weights_as(w.reshape(c, taps).T, calls).reshape(taps, c, 1)  # per tap a column
        bias = None if b is None else b.reshape(c, 1, 1)
        for i in range(n):
            phases = self._phases(x[i], buffers, None)
            wph = phases[0].shape[-1]
            flat = self._phase_rows(phases)
            acc = buffers.get(("acc",), (c, oh * wph), self.dtype)
            term = buffers.get(("term",), (c, oh * wph), self.dtype)
            # with out in x's memory, one chunk: all the input is copied before out is written
            step = c if shared else max(1, _CHUNK_BYTES // (oh * wph * self.dtype.itemsize))
            for lo in range(0, c, step):
                ch = slice(lo, min(c, lo + step))
                calls.extend(self._fill_phases(phases, x[i], ch))
                a, t = acc[ch], term[ch]
                for k, (at, phase) in enumerate(self._tap_offsets(wph)):
                    piece = flat[phase, ch, at : at + oh * wph]
                    if k == 0:
                        calls.append(functools.partial(np.multiply, piece, coef[k, ch], a))
                    else:
                        calls.append(functools.partial(np.multiply, piece, coef[k, ch], t))
                        calls.append(functools.partial(np.add, a, t, a))
                result = a.reshape(-1, oh, wph)[:, :, :ow]
                if bias is None:
                    calls.append(functools.partial(np.copyto, out[i, ch], result))
                else:
                    calls.append(functools.partial(np.add, result, bias[ch], out[i, ch]))
                if finish is not None:
                    calls.extend(finish(out[i, ch]))
        return calls

    def last(self, out, x, w, b, buffers, shared, finish, consume=None) -> list:
        g = self.g
        n, c = self.x_shape[:2]
        oh, ow = g.out
        calls = []
        phases = self._phases_last(buffers)
        cp = phases.shape[-1]
        groups = [
            (view, _padded_copy(coef, cp, calls, w.flags.writeable).reshape(view.shape[:2] + (-1,)))
            for view, coef in self._tap_grids(phases, w)
        ]
        acc = buffers.get(("acc",), (oh, ow * cp), self.dtype)
        term = buffers.get(("term",), (oh, ow * cp), self.dtype) if len(groups) > 1 else None
        result = acc.reshape(oh, ow, cp)[:, :, :c].transpose(2, 0, 1)
        # the bias repeated along OW, added channels-last before the copy out: a transposing add
        # took 2.5-3x the time of the contiguous add and the transposing copy (384 x 14 x 14)
        bias = None if b is None else _padded_copy(np.broadcast_to(b, (ow, c)), cp, calls, b.flags.writeable)
        for i in range(n):
            calls.extend(self._fill_phases(phases[..., :c].transpose(0, 3, 1, 2), x[i], slice(None)))
            for k, (view, coef) in enumerate(groups):
                calls.append(functools.partial(np.einsum, "ijhx,ijx->hx", view, coef, out=term if k else acc))
                if k:
                    calls.append(functools.partial(np.add, acc, term, acc))
            if bias is not None:
                calls.append(functools.partial(np.add, acc, bias.reshape(-1), acc))
            if consume is not None:  # the sums read where they are (``_ConvChain``): (C, pixels)
                calls.extend(finish(acc) if finish is not None else [])
                calls.extend(consume(i, acc.reshape(oh * ow, cp)[:, :c].T))
                continue
            # out by blocks of rows: a pixel's channels are a cache line or more apart in acc, and
            # a copy that steps through all pixels per channel lost them from L1 on maps larger
            # than 16 x 16 (28 x 28 x 192: 123 us in one copy, 67 by blocks of 256 pixels)
            rows = max(1, _COPY_PIXELS // ow)
            for r in range(0, oh, rows):
                calls.append(functools.partial(np.copyto, out[i, :, r : r + rows], result[:, r : r + rows]))
            if finish is not None:
                calls.extend(finish(out[i]))
        return calls

    def _phases_last(self, buffers):
        """The stride phases of the padded image channels-last, (sh * sw, Hph, Wph, C + pad):
        phase a * sw + b holds padded[a::sh, b::sw] (a single phase at stride 1). The pad
        channels are zeros, with zero weights and bias: where C floats are a multiple of 256
        bytes, one cache line more makes a pixel's channels an odd number of lines, so that the
        transposing copies in and out, which step by a pixel's channels, spread over all the
        cache's sets (384 x 14 x 14: the copy out took 98 us at 384 channels, 18 at 240)."""
        g = self.g
        c, h, wd = self.x_shape[1:]
        (sh, sw) = g.strides
        hph = -(-(h + g.begin[0] + g.end[0]) // sh)
        wph = -(-(wd + g.begin[1] + g.end[1]) // sw)
        item = self.dtype.itemsize
        pad = 64 // item if c * item % 256 == 0 and c * item >= 512 else 0
        shape = (sh * sw, hph, wph, c + pad)
        # keyed by the image's size too: sizes that round up to the same phases have their borders
        # in different rows (what one conv writes would be another's padding)
        return buffers.get(("last", g.begin, g.end, g.strides, (h, wd)), shape, self.dtype)

    def _tap_grids(self, phases, w) -> list:
        """Per stride phase that taps read, in the order of their first tap: the taps' windows
        as one read-only view (taps down, taps across, OH, OW * (C + pad)) and their weights as a view
        of the same shape but OH: (taps down, taps across, OW * C), each weight repeated OW
        times. The taps of one phase are the kernel rows ki with ki * dh = a (mod sh) and the
        columns likewise, each an arithmetic progression, so that their offsets in the phase
        are too: one einsum sums them, in the weights' order within the phase."""
        g = self.g
        c = self.x_shape[1]
        (kh, kw), (oh, ow), (sh, sw), (dh, dw) = g.kernel, g.out, g.strides, g.dilations
        wph, cp = phases.shape[2:]
        weights = w.reshape(c, kh, kw)
        item = phases.itemsize
        order = []
        for ki, kj in np.ndindex(kh, kw):
            phase = ((ki * dh) % sh, (kj * dw) % sw)
            if phase not in order:
                order.append(phase)
        grids = []
        for a, bb in order:
            rows = [ki for ki in range(kh) if (ki * dh) % sh == a]
            cols = [kj for kj in range(kw) if (kj * dw) % sw == bb]
            # the next tap in the same phase is sh / gcd(dh, sh) rows on: offsets step evenly
            rstep = rows[1] - rows[0] if len(rows) > 1 else 1
            cstep = cols[1] - cols[0] if len(cols) > 1 else 1
            r0, t0 = rows[0] * dh // sh, cols[0] * dw // sw
            start = phases[a * sw + bb, r0:, t0:]
            view = as_strided(
                start,
                (len(rows), len(cols), oh, ow * cp),
                (rstep * dh // sh * wph * cp * item, cstep * dw // sw * cp * item, wph * cp * item, item),
                writeable=False,
            )
            picked = weights[:, rows[0] :: rstep, cols[0] :: cstep][:, : len(rows), : len(cols)]
            coef = np.broadcast_to(picked.transpose(1, 2, 0)[:, :, None, :], (len(rows), len(cols), ow, c))
            grids.append((view, coef))
        return grids

    # -- padding and stride phases

    def _padded(self, image, buffers, calls):
        """The padded image (C, Hp, Wp) in a shared buffer; appends the interior's copy to calls."""
        g = self.g
        c, h, wd = image.shape
        shape = (c, h + g.begin[0] + g.end[0], wd + g.begin[1] + g.end[1])
        pad = buffers.get(("padded", g.begin, g.end), shape, self.dtype)
        calls.append(
            functools.partial(
                np.copyto, pad[:, g.begin[0] : g.begin[0] + h, g.begin[1] : g.begin[1] + wd], image
            )
        )
        return pad

    def _phases(self, image, buffers, calls):
        """The stride phases (sh * sw, C, Hph, Wph) of the padded image, phase a * sw + b holding
        padded[:, a::sh, b::sw], with ``Wph`` floats of slack after the last phase (rows read up
        to a row past a channel's end, into columns that are dropped). Appends the copies of the
        interiors to calls unless None (the rows path copies them per chunk)."""
        g = self.g
        c, h, wd = image.shape
        (sh, sw) = g.strides
        hp, wp = h + g.begin[0] + g.end[0], wd + g.begin[1] + g.end[1]
        hph, wph = -(-hp // sh), -(-wp // sw)
        count = sh * sw * c * hph * wph
        key = ("phases", g.begin, g.end, g.strides, (h, wd))  # (h, wd): as in _phases_last
        flat = buffers.get(key, (count + wph,), self.dtype)
        phases = flat[:count].reshape(sh * sw, c, hph, wph)
        if calls is not None:
            calls.extend(self._fill_phases(phases, image, slice(None)))
        return phases

    def _fill_phases(self, phases, image, ch) -> list:
        """The copies of image's channels ``ch`` into the interiors of their phases."""
        g = self.g
        h, wd = image.shape[1:]
        (sh, sw) = g.strides
        hph, wph = phases.shape[2:]
        calls = []
        for a, bb in np.ndindex(sh, sw):
            # phase row r is padded row r * sh + a, input row r * sh + a - begin
            r0, r1 = _phase_span(a, sh, g.begin[0], h, hph)
            t0, t1 = _phase_span(bb, sw, g.begin[1], wd, wph)
            if r1 <= r0 or t1 <= t0:
                continue
            x0, y0 = r0 * sh + a - g.begin[0], t0 * sw + bb - g.begin[1]
            source = image[ch, x0 : x0 + sh * (r1 - r0 - 1) + 1 : sh, y0 : y0 + sw * (t1 - t0 - 1) + 1 : sw]
            calls.append(functools.partial(np.copyto, phases[a * sw + bb, ch, r0:r1, t0:t1], source))
        return calls

    def _tap_offsets(self, wph: int) -> list:
        """(flat offset in its phase's channel, phase) of each tap, in the weights' order."""
        g = self.g
        (sh, sw), (dh, dw) = g.strides, g.dilations
        return [
            ((ki * dh // sh) * wph + kj * dw // sw, (ki * dh % sh) * sw + kj * dw % sw)
            for ki, kj in np.ndindex(*g.kernel)
        ]

    def _phase_rows(self, phases):
        """phases as (phase, C, Hph * Wph + Wph): each channel's rows and the slack after them."""
        p, c, hph, wph = phases.shape
        step = phases.itemsize
        return as_strided(phases, (p, c, hph * wph + wph), (c * hph * wph * step, hph * wph * step, step))

    def _phase_taps(self, phases) -> list:
        """Each tap's windows (C, OH, OW) as a view of its phase, in the weights' order."""
        g = self.g
        oh, ow = g.out
        wph = phases.shape[-1]
        taps = []
        for at, phase in self._tap_offsets(wph):
            r, t = divmod(at, wph)
            taps.append(phases[phase, :, r : r + oh, t : t + ow])
        return taps


def _padded_copy(view, channels: int, calls: list, writeable: bool) -> np.ndarray:
    """A copy of a view (..., C) of the weights or bias with zeros after its C channels up to
    ``channels``, copied as _weights_as copies (again at each run where ``writeable``: a
    broadcast view is read-only whatever the weights)."""
    copy = np.zeros(view.shape[:-1] + (channels,), view.dtype)
    part = copy[..., : view.shape[-1]]
    part[...] = view
    if writeable:
        calls.append(functools.partial(np.copyto, part, view))
    return copy


def _with_bias(weights, b, calls: list) -> np.ndarray:
    """The weights (M, K) with the bias b (M,) as column K, copied as _weights_as copies."""
    m, k = weights.shape
    copy = np.empty((m, k + 1), weights.dtype)
    copy[:, :k], copy[:, k] = weights, b
    if weights.flags.writeable or b.flags.writeable:
        calls.append(functools.partial(np.copyto, copy[:, :k], weights))
        calls.append(functools.partial(np.copyto, copy[:, k], b))
    return copy


def _weights_as(view, calls: list) -> np.ndarray:
    """A C-contiguous copy of a view of the weights. Constants are read-only and are copied once;
    weights that may change between runs (computed by the graph) are copied again by the first
    of ``calls``, which this appends to."""
    copy = np.ascontiguousarray(view)
    if view.flags.writeable:
        calls.append(functools.partial(np.copyto, copy, view))
    return copy


def _phase_span(a: int, s: int, begin: int, size: int, count: int) -> tuple[int, int]:
    """The phase positions [r0, r1) whose padded index r * s + a falls inside the input."""
    r0 = max(0, -(-(begin - a) // s))
    r1 = min(count, (size - 1 + begin - a) // s + 1)
    return r0, r1


class _Buffers:
    """Scratch arrays by (role, shape, dtype, fill), filled when made: convolutions of the same padded
    geometry share their padding buffer (only its interior is ever written), and all share their
    accumulators. One instance per thread for kernels and unbound calls (``_thread_buffers``), one
    per arena set for bound calls (``_arena_buffers``): the runs of one set never overlap."""

    __slots__ = ("__weakref__", "arrays", "nbytes")

    def __init__(self):
        self.arrays: dict[tuple, np.ndarray] = {}
        self.nbytes = 0

    def get(self, role: tuple, shape: tuple, dtype, fill=0) -> np.ndarray:
        key = (role, tuple(shape), np.dtype(dtype), fill)
        array = self.arrays.get(key)
        if array is None:
            if self.nbytes > SCRATCH_BYTES:  # many geometries: start again rather than hold them all
                self.arrays.clear()
                self.nbytes = 0
            array = self.arrays[key] = np.full(shape, fill, dtype)
            self.nbytes += array.nbytes
        return array


def _thread_buffers() -> _Buffers:
    buffers = getattr(_SCRATCH, "conv", None)
    if buffers is None:
        buffers = _SCRATCH.conv = _Buffers()
    return buffers


_ARENA_BUFFERS: dict[int, _Buffers] = {}
_ARENA_LOCK = threading.Lock()


def _arena_buffers(out: np.ndarray) -> _Buffers:
    """The buffers of the arena set that ``out`` lies in (the array at the end of its bases),
    dropped with it."""
    root = out
    while isinstance(root.base, np.ndarray):
        root = root.base
    with _ARENA_LOCK:
        buffers = _ARENA_BUFFERS.get(id(root))
        if buffers is None:
            buffers = _ARENA_BUFFERS[id(root)] = _Buffers()
            weakref.finalize(root, _ARENA_BUFFERS.pop, id(root), None)
    return buffers


def _run_calls(calls: tuple) -> None:
    for call in calls:
        call()


@functools.lru_cache(maxsize=256)
def _plan(x_shape, w_shape, dtype, g: _Geom, group: int) -> _ConvPlan:
    return _ConvPlan(x_shape, w_shape, dtype, g, group)


def _planned_conv(x, w, b, g: _Geom, group: int, dest=None):
    """The 2-D convolution of x with w (plus b) by its plan, into ``dest`` when given."""
    plan = _plan(x.shape, w.shape, x.dtype, g, group)
    out = dest if dest is not None else np.empty(plan.out_shape, x.dtype)
    _run_calls(plan.calls(out, np.ascontiguousarray(x), np.ascontiguousarray(w), b, _thread_buffers()))
    return out


class _Epilogue(NamedTuple):
    """The elementwise op that reads a Conv's result and nothing else reads, applied by the
    conv's plan to each part of its output in place (``_ConvPlan.calls``): the calls of the op's
    own prepared call (runtime/kernels/elementwise.py), so that the results are those of the two
    steps bit for bit, without a step of its own or a pass over the whole output from memory.
    The CPU executor pairs the two steps (runtime/fusions.py, ``_fuse_epilogues``); the graph
    keeps both ops, so the GPU backends see the graph unchanged."""

    op: str  # Relu | Clip | HardSwish | HardSigmoid
    alpha: float = 0.0
    beta: float = 0.0

    def calls(self, part, extras: tuple, buffers) -> list:
        """The op's calls on ``part`` of the output, its other inputs ``extras`` (Clip's 0-d
        bounds)."""
        if self.op == "Relu":  # a full operand of zeros, as the prepared Relu: numpy's fast loop
            zeros = buffers.get(("zeros",), part.shape, part.dtype)
            return [functools.partial(np.maximum, part, zeros, out=part)]
        if self.op == "Clip":
            lo, hi = extras
            return [functools.partial(_CLIP, part, lo, hi, part)]
        swish = self.op == "HardSwish"
        temp = buffers.get(("epilogue",), part.shape, part.dtype) if swish else None
        return [_hard_passes(part, part, self.alpha, self.beta, swish, temp)]


def _epilogue(op_type: str, attrs: dict, extras: list, dtype) -> _Epilogue | None:
    """The _Epilogue of an op with inputs beyond the conv's result of specs ``extras``, or None
    where its prepared call is not one that runs in place per part (Clip's bounds not 0-d)."""
    if op_type == "Relu" and not extras:
        return _Epilogue("Relu")
    if op_type == "Clip" and len(extras) == 2 and all(e == (dtype, ()) for e in extras):
        return _Epilogue("Clip")
    if op_type in ("HardSwish", "HardSigmoid") and not extras:
        return _Epilogue(op_type, attrs.get("alpha", 1 / 6), attrs.get("beta", 0.5))
    return None


class _KeptCalls:
    """A prepared call that makes its numpy calls (``_calls(out, args)``) once per arena set when
    bound and, called unbound, keeps those it made for the last arrays it got (``last``)."""

    __slots__ = ()

    def __call__(self, out, *args):
        last = self.last
        if (
            last is None
            or last[0] is not out
            or len(args) != len(last[1])
            or any(a is not k for a, k in zip(args, last[1]))
        ):
            last = self.last = (out, args, self._calls(out, args))
        _run_calls(last[2])

    def bind(self, out, *args):
        return functools.partial(_run_calls, self._calls(out, args))


class _ConvCall(_KeptCalls):
    """The prepared call of a 2-D float Conv whose shapes are static: its plan's calls, made once
    per arena set when bound. Called unbound (its input the result of a kernel), it keeps the
    calls it made for the last arrays it got: a method stores kernel results in the same arena
    views at every run, so they are made once there too (ShuffleNet's convs after Slice and
    Reshape: 56 of them took 2-3 ms a run to make their calls). With an ``epilogue`` its output
    is the epilogue op's and the op's other inputs follow the conv's (``with_epilogue``)."""

    __slots__ = ("epilogue", "last", "n_conv", "plan")

    def __init__(self, plan: _ConvPlan, epilogue: _Epilogue | None = None, n_conv: int = 3):
        self.plan, self.epilogue, self.n_conv = plan, epilogue, n_conv
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def with_epilogue(self, op_type: str, attrs: dict, n_conv: int, extras: list) -> _ConvCall | None:
        """This conv followed by ``op_type`` (its first input this conv's result, its others of
        specs ``extras``) as one call, or None where that op is not one a plan applies."""
        epilogue = _epilogue(op_type, attrs, extras, self.plan.dtype)
        return None if epilogue is None else _ConvCall(self.plan, epilogue, n_conv)

    def _calls(self, out, args) -> tuple:
        buffers = _arena_buffers(out)  # another thread may run this set later, never two at once
        x, w, b, finish = self.parts(out, args, buffers)
        return tuple(self.plan.calls(out, x, w, b, buffers, finish))

    def parts(self, out, args, buffers) -> tuple:
        """(x, w, b or None, finish or None) of this call's arguments, checked against the plan
        (``out`` too unless None); ``finish(part)`` makes the epilogue's calls on a part."""
        conv, extras = args[: self.n_conv], args[self.n_conv :]
        x, w, b = conv if len(conv) == 3 else (*conv, None)
        self._check(out, x, w, b)
        finish = None
        if self.epilogue is not None:
            if any(e.dtype != self.plan.dtype or e.ndim for e in extras):
                raise TypeError("not the declared types")
            epilogue = self.epilogue

            def finish(part):
                return epilogue.calls(part, extras, buffers)

        return x, w, b, finish

    def _check(self, out, x, w, b) -> None:
        plan = self.plan
        # x is None where the conv reads another conv's sums where they are (``_ConvChain``)
        if (x is not None and x.shape != plan.x_shape) or w.shape != plan.w_shape:
            raise TypeError("not the declared shapes")
        if out is not None and out.shape != plan.out_shape:
            raise TypeError("not the declared shapes")
        if (
            (x is not None and x.dtype != plan.dtype)
            or w.dtype != plan.dtype
            or (b is not None and b.dtype != plan.dtype)
        ):
            raise TypeError("not the declared types")
        if b is not None and b.shape != (plan.w_shape[0],):
            raise TypeError("not the declared bias shape")


class _ConvChain(_KeptCalls):
    """A depthwise Conv on the ``last`` path (with its epilogue, if any) whose result only a
    pointwise Conv reads, as one prepared call: the pointwise product reads the depthwise sums
    where they are, channels-last in the accumulator, as the transposed operand of its BLAS
    product, (M, C) @ (C, pixels) with the pixels Cp floats apart (one product per group, as
    numpy's stacked product makes one per group: ShuffleNet's grouped 1 x 1 convs); the depthwise
    result is never copied out to its own tensor (a transposing copy of all of it). A depthwise
    conv on the ``rows`` path at stride 1 is chained too, computed the ``last`` way: there one
    einsum sums all the taps in the weights' order, the rows path's order, with the same bits,
    and without the copy out the transposing copy in costs less than the rows' two passes a
    tap save (MobileNetV2's 32 x 112 x 112). A product
    with a transposed operand gives OpenBLAS's bits of the contiguous one (the same kernel and
    blocking, only the packing reads differently), and the epilogue is elementwise, so the
    result is the two steps' bit for bit (tests/runtime/test_conv_chain.py checks it against
    offload.evaluate). The CPU executor pairs the two steps (runtime/fusions.py,
    ``_fuse_depthwise_pointwise``); the graph keeps both. Its arguments are the depthwise
    call's (x, weights, bias, epilogue inputs), then the pointwise call's after its input."""

    __slots__ = ("depthwise", "last", "n_first", "pointwise")

    def __init__(self, depthwise: _ConvCall, pointwise: _ConvCall, n_first: int):
        self.depthwise, self.pointwise, self.n_first = depthwise, pointwise, n_first
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    @staticmethod
    def fits(depthwise, pointwise) -> bool:
        """Whether a chain of these two calls (their plans) is one this class runs."""
        if type(depthwise) is not _ConvCall or type(pointwise) is not _ConvCall:
            return False
        first, second = depthwise.plan, pointwise.plan
        return (
            (first.path == "last" or (first.path == "rows" and first.g.strides == (1, 1)))
            and second.path == "pointwise"
            and not second.bias_in_product(pointwise.n_conv == 3)  # the chain adds the bias after
            and first.dtype == second.dtype
            and first.out_shape == second.x_shape
        )

    def _calls(self, out, args) -> tuple:
        buffers = _arena_buffers(out)
        x, w, b, finish = self.depthwise.parts(None, args[: self.n_first], buffers)
        _, w2, b2, finish2 = self.pointwise.parts(out, (None,) + args[self.n_first :], buffers)
        first, second = self.depthwise.plan, self.pointwise.plan
        m, c, group = second.w_shape[0], second.x_shape[1], second.group
        mg, cg = m // group, c // group
        calls = []
        if first.x_shape[0] > 1 and np.may_share_memory(out, x):  # images after the first read late
            copy = buffers.get(("input",), first.x_shape, first.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        weights = w2.reshape(group, mg, cg)

        def consume(i, sums):  # sums: (C, pixels), a view of the accumulator, pixels Cp floats apart
            results = out[i].reshape(group, mg, -1)
            return [
                functools.partial(np.matmul, weights[k], sums[k * cg : (k + 1) * cg], results[k])
                for k in range(group)
            ]

        if first.path == "rows":  # stride 1: one einsum sums the taps in the rows path's order
            first = _ConvPlan(first.x_shape, first.w_shape, first.dtype, first.g, first.group)
            first.path = "last"
        calls += first.last(None, x, w, b, buffers, False, finish, consume)
        if b2 is not None:
            calls.append(functools.partial(np.add, out, b2.reshape(1, m, 1, 1), out))
        if finish2 is not None:
            calls.extend(finish2(out))
        return tuple(calls)


@prepared("Conv")
def _conv_prepared(attrs, inputs, output):
    """A _ConvCall for a 2-D Conv of float32 or float64 whose inputs and output are all of one
    type and of static shapes; None otherwise (the kernel runs it)."""
    if len(inputs) not in (2, 3) or any(spec is None for spec in inputs) or output is None:
        return None
    (dtype, x_shape), (w_dtype, w_shape) = inputs[:2]
    if dtype not in (np.float32, np.float64) or len(x_shape) != 4 or len(w_shape) != 4:
        return None
    if w_dtype != dtype or output[0] != dtype or (len(inputs) == 3 and inputs[2][0] != dtype):
        return None
    try:
        g = _geometry(
            "Conv",
            x_shape,
            attrs["kernel_shape"] or w_shape[2:],
            attrs["auto_pad"],
            attrs["dilations"],
            attrs["pads"],
            attrs["strides"],
        )
        plan = _ConvPlan(x_shape, w_shape, dtype, g, attrs["group"])
    except (ShapeError, ValueError, TypeError):
        return None
    if plan.out_shape != tuple(output[1]) or (len(inputs) == 3 and tuple(inputs[2][1]) != (w_shape[0],)):
        return None
    return _ConvCall(plan)


def _conv(op, x, w, auto_pad, dilations, group, kernel_shape, pads, strides, ctx=None, b=None):
    """Conv's sums of x with w plus the bias b (or None): by a plan (``_ConvPlan``) in 2-D when x
    and w are both float32 or both float64, by ``_conv_product`` otherwise."""
    g = _geometry(op, x.shape, kernel_shape or w.shape[2:], auto_pad, dilations, pads, strides)
    dest = None if ctx is None else out_for(ctx, 0, x.shape[:1] + w.shape[:1] + g.out, x.dtype)
    if x.ndim == 4 and w.ndim == 4 and x.dtype == w.dtype and x.dtype in (np.float32, np.float64):
        bias = None if b is None else np.ascontiguousarray(b, x.dtype).reshape(-1)
        return _planned_conv(x, w, bias, g, group, dest)
    y = _conv_product(x, w, g, group, dest)
    if b is not None:
        y += _channel_bias(b, x.ndim - 2)
    return y


@kernel("Conv")
def conv(ctx, X, W, B=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    b = None if B is None else widened(B)
    y = _conv("Conv", widened(X), widened(W), auto_pad, dilations, group, kernel_shape, pads, strides, ctx, b)
    return y.astype(X.dtype, copy=False)


def _integer_conv(
    op, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group, kernel_shape, pads, strides
):
    """Convolution of zero-point-shifted integers, exact in float64; padding reads the zero point."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    if x_zero_point is not None:
        x = x - np.asarray(x_zero_point, np.float64)
    if w_zero_point is not None:
        zp = np.asarray(w_zero_point, np.float64)
        w = w - (zp.reshape((-1,) + (1,) * (w.ndim - 1)) if zp.ndim == 1 else zp)
    return _conv(op, x, w, auto_pad, dilations, group, kernel_shape, pads, strides)


@kernel("ConvInteger")
def conv_integer(
    ctx,
    x,
    w,
    x_zero_point=None,
    w_zero_point=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    pads,
    strides,
):
    y = _integer_conv(
        "ConvInteger",
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    return y.astype(np.int32)


@kernel("QLinearConv")
def qlinear_conv(
    ctx,
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    pads,
    strides,
):
    nd = x.ndim - 2
    acc = _integer_conv(
        "QLinearConv",
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    if B is not None:
        acc += np.asarray(B, np.float64).reshape((1, -1) + (1,) * nd)
    ws = np.asarray(w_scale, np.float64)
    if ws.ndim == 1:
        ws = ws.reshape((1, -1) + (1,) * nd)
    scale = np.asarray(x_scale, np.float64) * ws / np.asarray(y_scale, np.float64)
    return saturate(acc * scale + np.asarray(y_zero_point, np.float64), np.asarray(y_zero_point).dtype)


def _transpose_pads(auto_pad, pads, output_shape, size, strides, full):
    """(begin, end) crops of the full ConvTranspose result; a negative one extends it with zeros."""
    nd = len(size)
    if output_shape:
        target = tuple(int(v) for v in output_shape)[-nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = tuple(i * s for i, s in zip(size, strides))
    elif auto_pad in ("NOTSET", "", "VALID"):
        p = _ints(pads if auto_pad != "VALID" else None, 2 * nd, 0)
        return p[:nd], p[nd:]
    else:
        raise unsupported("ConvTranspose", f"auto_pad={auto_pad!r}")
    begin, end = [], []
    for f, t in zip(full, target):
        total = f - t
        if total < 0:
            # A target larger than the full result grows it at the end, like output_padding.
            begin.append(0)
            end.append(total)
            continue
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


@kernel("ConvTranspose")
def conv_transpose(
    ctx,
    X,
    W,
    B=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    output_padding,
    output_shape,
    pads,
    strides,
):
    x, w = widened(X), widened(W)
    n, c = x.shape[:2]
    size = x.shape[2:]
    nd = len(size)
    kernel = tuple(int(k) for k in (kernel_shape or w.shape[2:]))
    strides = _ints(strides, nd, 1)
    dilations = _ints(dilations, nd, 1)
    extra = _ints(output_padding, nd, 0)
    if group < 1 or c % group or w.shape[0] != c:
        raise ShapeError(
            f"ConvTranspose: input with {c} channels, weights of shape {w.shape} and group={group} do not fit"
        )
    cg, mg = c // group, w.shape[1]
    # Every input pixel times the kernel: (G, N*size, C/G) @ (G, C/G, M/G*kernel).
    a = x.reshape((n, group, cg, prod(size))).transpose(1, 0, 3, 2).reshape(group, -1, cg)
    cols = np.matmul(a, w.reshape(group, cg, -1)).reshape((group, n) + size + (mg,) + kernel)
    size_axes, kernel_axes = tuple(range(2, 2 + nd)), tuple(range(3 + nd, 3 + 2 * nd))
    cols = cols.transpose((1, 0, 2 + nd) + kernel_axes + size_axes).reshape((n, group * mg) + kernel + size)

    full = tuple(
        s * (i - 1) + e + (k - 1) * d + 1 for i, s, e, k, d in zip(size, strides, extra, kernel, dilations)
    )
    begin, end = _transpose_pads(auto_pad, pads, output_shape, size, strides, full)
    if min(begin) < 0:
        raise unsupported("ConvTranspose", f"negative pads {tuple(pads)}")
    # A negative end pad grows the result with zeros at the end.
    buf = np.zeros((n, group * mg) + tuple(f + max(0, -e) for f, e in zip(full, end)), x.dtype)
    _scatter_windows(buf, cols, strides, dilations)
    y = buf[(slice(None), slice(None)) + tuple(slice(b, f - e) for b, f, e in zip(begin, full, end))]
    if B is not None:
        y = y + _channel_bias(B, nd)
    return np.ascontiguousarray(y).astype(X.dtype, copy=False)


@kernel("Col2Im")
def col2im(ctx, input, image_shape, block_shape, *, dilations, pads, strides):
    x = widened(input)
    image = tuple(int(v) for v in image_shape)
    block = tuple(int(v) for v in block_shape)
    nd = len(image)
    strides = _ints(strides, nd, 1)
    dilations = _ints(dilations, nd, 1)
    p = _ints(pads, 2 * nd, 0)
    begin, end = p[:nd], p[nd:]
    blocks = tuple(
        (i + b + e - (k - 1) * d - 1) // s + 1
        for i, b, e, k, d, s in zip(image, begin, end, block, dilations, strides)
    )
    n, ck, length = x.shape
    if ck % prod(block) or length != prod(blocks):
        raise ShapeError(f"Col2Im: input of shape {x.shape} does not fit blocks {block} over image {image}")
    cols = x.reshape((n, ck // prod(block)) + block + blocks)
    buf = np.zeros((n, cols.shape[1]) + tuple(i + b + e for i, b, e in zip(image, begin, end)), x.dtype)
    _scatter_windows(buf, cols, strides, dilations)
    y = buf[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(begin, image))]
    return np.ascontiguousarray(y).astype(input.dtype, copy=False)


# ---------------------------------------------------------------------------- sampling


def _taps(x, mode: str):
    """Integer sample positions and weights that interpolate at float positions x along one axis."""
    if mode == "nearest":
        return [(np.rint(x).astype(np.int64), np.ones_like(x))]
    lo = np.floor(x)
    t = x - lo
    lo = lo.astype(np.int64)
    if mode == "linear":
        return [(lo, 1 - t), (lo + 1, t)]
    # Cubic convolution (Keys) with a = -0.75, as in PyTorch and OpenCV.
    a = -0.75

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [(lo - 1, far(1 + t)), (lo, near(t)), (lo + 1, near(1 - t)), (lo + 2, far(2 - t))]


def _interpolate(img, pos, mode: str, fix_tap=None):
    """Sample img (B, C, *S) at float index positions pos (B, P, nd) -> (B, C, P).

    Taps outside the image read 0, unless ``fix_tap(index, axis)`` first maps them inside.
    """
    size = img.shape[2:]
    per_axis = [_taps(pos[..., i], mode) for i in range(len(size))]
    batch = np.arange(img.shape[0])[:, None]
    out = np.zeros(pos.shape[:2] + img.shape[1:2], img.dtype)
    for combo in itertools.product(*per_axis):
        weight = prod(w for _, w in combo)
        index, valid = [], np.ones(weight.shape, bool)
        for axis, (i, _) in enumerate(combo):
            if fix_tap is not None:
                i = fix_tap(i, axis)
            valid &= (i >= 0) & (i < size[axis])
            index.append(np.clip(i, 0, size[axis] - 1))
        # Advanced indices around the channel slice put (B, P) first: (B, P, C).
        out += img[(batch, slice(None)) + tuple(index)] * (weight * valid)[..., None]
    return out.transpose(0, 2, 1)


def _reflect(x, low: float, high: float):
    """x folded into [low, high] by repeated reflection at both ends."""
    span = high - low
    if span <= 0:
        return np.zeros_like(x)
    d = np.abs(x - low)
    flips = np.floor(d / span)
    rest = d - flips * span
    return np.where(flips % 2 == 0, low + rest, high - rest)


def _inside(x, size: int, padding_mode: str, align_corners: int):
    """Positions outside [0, size-1] moved inside by the border or reflection rule."""
    if padding_mode == "reflection":
        x = _reflect(x, 0, size - 1) if align_corners else _reflect(x, -0.5, size - 0.5)
    return np.clip(x, 0, size - 1)


@kernel("GridSample")
def grid_sample(ctx, X, grid, *, align_corners, mode, padding_mode):
    modes = {
        "linear": "linear",
        "bilinear": "linear",
        "nearest": "nearest",
        "cubic": "cubic",
        "bicubic": "cubic",
    }
    if mode not in modes:
        raise unsupported("GridSample", f"mode={mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise unsupported("GridSample", f"padding_mode={padding_mode!r}")
    mode = modes[mode]
    if X.dtype.kind in "iu" and mode == "nearest":
        x = X.astype(np.float64)  # exact: nearest only copies values
    elif X.dtype.kind in "biuOSUc":
        raise unsupported("GridSample", f"mode={mode!r} on {X.dtype} input")
    else:
        x = widened(X)
    n, c = x.shape[:2]
    size = x.shape[2:]
    nd = len(size)
    if grid.shape[0] != n or grid.shape[-1] != nd:
        raise ShapeError(f"GridSample: grid of shape {grid.shape} does not fit input of shape {X.shape}")
    # The grid lists x (innermost axis) first; normalized [-1, 1] becomes index positions.
    pos = widened(grid)[..., ::-1].reshape(n, -1, nd).astype(x.dtype)
    extent = np.array(size, x.dtype)
    pos = (pos + 1) / 2 * (extent - 1) if align_corners else ((pos + 1) * extent - 1) / 2
    fix_tap = None
    if padding_mode != "zeros":
        if mode == "cubic":
            # Cubic reads each of its taps through the padding rule.
            def fix_tap(i, axis):
                return _inside(i.astype(x.dtype), size[axis], padding_mode, align_corners).astype(np.int64)
        else:
            pos = np.stack(
                [_inside(pos[..., i], size[i], padding_mode, align_corners) for i in range(nd)], -1
            )
    y = _interpolate(x, pos, mode, fix_tap)
    return y.reshape((n, c) + grid.shape[1:-1]).astype(X.dtype, copy=False)


@kernel("AffineGrid")
def affine_grid(ctx, theta, size, *, align_corners):
    size = tuple(int(v) for v in size)
    spatial = size[2:]
    nd = len(spatial)
    if theta.shape[1:] != (nd, nd + 1):
        raise ShapeError(f"AffineGrid: theta of shape {theta.shape} does not fit size {size}")
    t = widened(theta)

    def axis(m):
        if m <= 1:
            return np.zeros(m, t.dtype)
        if align_corners:
            return np.linspace(-1, 1, m, dtype=t.dtype)
        return ((2 * np.arange(m) + 1) / m - 1).astype(t.dtype)

    mesh = np.meshgrid(*(axis(m) for m in spatial), indexing="ij")
    # Homogeneous positions (x, y[, z], 1): innermost axis first, as GridSample reads them.
    base = np.stack(list(mesh[::-1]) + [np.ones(spatial, t.dtype)], axis=-1)
    grid = base.reshape(-1, nd + 1) @ t.transpose(0, 2, 1)  # (N, points, nd)
    return grid.reshape((size[0],) + spatial + (nd,)).astype(theta.dtype, copy=False)


@kernel("DeformConv")
def deform_conv(
    ctx, X, W, offset, B=None, mask=None, *, dilations, group, kernel_shape, offset_group, pads, strides
):
    x, w = widened(X), widened(W)
    g = _geometry("DeformConv", x.shape, kernel_shape or w.shape[2:], "NOTSET", dilations, pads, strides)
    n, c = x.shape[:2]
    nd = x.ndim - 2
    og = offset_group
    nk = prod(g.kernel)
    if c % og or offset.shape[1] != og * nk * nd or tuple(offset.shape[2:]) != g.out:
        raise ShapeError(
            f"DeformConv: offset of shape {offset.shape} does not fit input {x.shape}, kernel {g.kernel}"
        )
    # Undeformed sample positions o*s - begin + k*d: (kernel, nd, *out).
    k_at = np.indices(g.kernel).reshape(nd, nk)
    o_at = np.indices(g.out)
    base = np.stack(
        [
            (o_at[i] * g.strides[i] - g.begin[i])[None]
            + (k_at[i] * g.dilations[i]).reshape((nk,) + (1,) * nd)
            for i in range(nd)
        ],
        axis=1,
    )
    pos = base + widened(offset).reshape((n, og, nk, nd) + g.out)
    pos = np.moveaxis(pos, 3, -1).reshape(n * og, -1, nd).astype(x.dtype)
    vals = _interpolate(x.reshape((n * og, c // og) + x.shape[2:]), pos, "linear")
    vals = vals.reshape((n, og, c // og, nk) + g.out)
    if mask is not None:
        vals = vals * widened(mask).reshape((n, og, 1, nk) + g.out)
    cols = np.moveaxis(vals.reshape((n, c, nk) + g.out), 2, -1).reshape((n, c) + g.out + g.kernel)
    y = _grouped_product(cols, w, group)
    if B is not None:
        y += _channel_bias(B, nd)
    return y.astype(X.dtype, copy=False)


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


# ---------------------------------------------------------------------------- regions of interest


def _roi_axis(start, length, bins: int, samples: int, size: int):
    """Bilinear weights (bins, size) that average ``samples`` points per bin along one axis.

    Also returns the per-point corner indices and weights (bins, samples, 2) that max mode
    needs. Points beyond one pixel outside the image read 0; points near the edges clamp.
    """
    at = start + (np.arange(bins)[:, None] + (np.arange(samples) + 0.5) / samples) * (length / bins)
    outside = (at < -1) | (at > size)
    at = np.clip(at, 0, None)
    low = np.floor(at).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, at - low)
    weights = np.stack([1 - frac, frac], -1) * ~outside[..., None]
    index = np.stack([low, high], -1)
    dense = np.zeros((bins, size))
    rows = np.broadcast_to(np.arange(bins)[:, None, None], index.shape)
    np.add.at(dense, (rows, index), weights / samples)
    return dense, index, weights


@kernel("RoiAlign")
def roi_align(
    ctx,
    X,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    if mode not in ("avg", "max"):
        raise unsupported("RoiAlign", f"mode={mode!r}")
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise unsupported("RoiAlign", f"coordinate_transformation_mode={coordinate_transformation_mode!r}")
    half_pixel = coordinate_transformation_mode == "half_pixel"
    x = X.astype(np.float64)
    h, w = x.shape[2:]
    y = np.zeros((len(rois), x.shape[1], output_height, output_width))
    for r, (box, b) in enumerate(zip(np.asarray(rois, np.float64), np.asarray(batch_indices, np.int64))):
        x1, y1, x2, y2 = box * spatial_scale - (0.5 if half_pixel else 0.0)
        roi_h, roi_w = y2 - y1, x2 - x1
        if not half_pixel:
            roi_h, roi_w = max(roi_h, 1.0), max(roi_w, 1.0)
        sh = sampling_ratio if sampling_ratio > 0 else max(1, int(np.ceil(roi_h / output_height)))
        sw = sampling_ratio if sampling_ratio > 0 else max(1, int(np.ceil(roi_w / output_width)))
        ay, iy, wy = _roi_axis(y1, roi_h, output_height, sh, h)
        ax, ix, wx = _roi_axis(x1, roi_w, output_width, sw, w)
        if mode == "avg":
            y[r] = ay @ x[b] @ ax.T
            continue
        # Max mode takes, like the reference runtimes, the largest weighted corner of any point.
        corners = x[b][:, iy[:, :, :, None, None, None], ix[None, None, None]]  # C, bh, sh, 2, bw, sw, 2
        weighted = corners * (wy[:, :, :, None, None, None] * wx[None, None, None])
        y[r] = weighted.max(axis=(2, 3, 5, 6))
    return y.astype(X.dtype)


@kernel("MaxRoiPool")
def max_roi_pool(ctx, X, rois, *, pooled_shape, spatial_scale):
    ph, pw = (int(v) for v in pooled_shape)
    h, w = X.shape[2:]
    y = np.zeros((len(rois), X.shape[1], ph, pw), X.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        # Box corners round half away from zero (C's round), as in Caffe's RoI pooling.
        corner = roi[1:] * roi.dtype.type(spatial_scale)
        x1, y1, x2, y2 = (np.sign(corner) * np.floor(np.abs(corner) + 0.5)).astype(np.int64)
        rows = _roi_bins(y1, y2, ph, h)  # (ph, h) membership
        cols = _roi_bins(x1, x2, pw, w)
        # Separable max: over each bin's columns, then over its rows; empty bins are 0.
        img = X[b].astype(np.float64)
        by_col = np.where(cols[None, None], img[:, :, None, :], -np.inf).max(-1)  # C, h, pw
        full = np.where(rows[None, :, :, None], by_col[:, None], -np.inf).max(2)  # C, ph, pw
        y[r] = np.where(np.isneginf(full), 0, full)
    return y


def _roi_bins(start: int, end: int, bins: int, size: int):
    """Which of ``size`` pixels fall in each of ``bins`` equal bins of [start, end]: (bins, size)."""
    step = max(end - start + 1, 1) / bins
    k = np.arange(bins)
    lo = np.clip(np.floor(k * step).astype(np.int64) + start, 0, size)
    hi = np.clip(np.ceil((k + 1) * step).astype(np.int64) + start, 0, size)
    at = np.arange(size)
    return (at >= lo[:, None]) & (at < hi[:, None])


# ---------------------------------------------------------------------------- other


@kernel("LRN")
def lrn(ctx, X, *, alpha, beta, bias, size):
    x = widened(X)
    before = (size - 1) // 2
    square = np.pad(x * x, [(0, 0), (before, size - 1 - before)] + [(0, 0)] * (x.ndim - 2))
    sums = sliding_window_view(square, size, axis=1).sum(-1)
    return (x / (bias + alpha / size * sums) ** beta).astype(X.dtype, copy=False)


@kernel("CausalConvWithState")
def causal_conv_with_state(ctx, input, weight, bias=None, past_state=None, *, activation):
    if activation not in ("none", "silu", "swish"):
        raise unsupported("CausalConvWithState", f"activation={activation!r}")
    x, w = widened(input), widened(weight)
    n, c, _ = x.shape
    k = w.shape[-1]
    if w.shape != (c, 1, k):
        raise ShapeError(
            f"CausalConvWithState: weight of shape {w.shape} does not fit input of shape {x.shape}"
        )
    past = np.zeros((n, c, k - 1), x.dtype) if past_state is None else widened(past_state)
    seq = np.concatenate([past, x], axis=2)
    # Depthwise: each channel's windows dotted with its own kernel.
    y = np.einsum("nclk,ck->ncl", sliding_window_view(seq, k, axis=2), w[:, 0])
    if bias is not None:
        y = y + widened(bias)[:, None]
    if activation != "none":
        y = y / (1 + np.exp(-y))
    present = seq[:, :, seq.shape[2] - (k - 1) :]
    return y.astype(input.dtype, copy=False), present.astype(input.dtype, copy=False)
