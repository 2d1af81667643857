"""Convolution recipes: per 2-D convolution of fixed shapes, its path and the numpy calls that compute it."""

from __future__ import annotations

import functools
from math import prod

import numpy as np
from numpy.lib.stride_tricks import as_strided

from offload.errors import ShapeError

from ._util import compiled_loops as _loops
from .buffers import _run_calls, _thread_buffers
from .windows import _columns, _Geom, _geometry

# ---------------------------------------------------------------------------- convolution recipes
#
# A 2-D convolution's shapes fix everything but the arithmetic: which path computes it, the
# geometry of its windows, the views its numpy calls read and write. ``_ConvRecipe`` works these
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
# A column matrix of at most this many elements is one numpy copy of the padded image's window
# view, not ``loops.im2col``: the compiled loop's call takes 4-8 us to dispatch its eight
# arguments, more than the copy (the same values either way). A voice-activity net's 1-D convs
# (192-1161 elements, its STFT's 768 at stride 128): 3-7 us against 5-12 a call; columns of
# 12288 and 40960 elements on a shared machine: 4.6 against 6.4 us, 7.3 against 8.7.
_NUMPY_COLUMNS = 16384
# A one-group column matrix of more than _BAND_FROM bytes whose product has at most
# _BAND_CHANNELS output channels is made and multiplied by bands of output rows of about
# _BAND_BYTES each (``_ConvRecipe.banded``): a product of so few rows is bound by memory, and a
# band's columns, product and epilogue stay in the core's L2 cache. Measured at 1 thread on the
# AMD EPYC (Zen 3) test machine, 3 x 3 convs, whole matrix against bands of 1 MB: 32 -> 32 on
# 450 x 60 11.5 -> 8.9 ms, on 225 x 30 3.4 -> 2.9, 16 -> 16 on 320 x 320 16.8 -> 15.3, 1 -> 32 on
# 900 x 120 2.75 -> 2.45; with 64 or more output channels the bands' smaller products cost more
# than the memory they save (64 -> 128 on 112 x 112 25.4 -> 28.1, 64 -> 64 on 224 x 224 61.7 -> 67.9).
_BAND_FROM = 4 << 20
_BAND_CHANNELS = 32
_BAND_BYTES = 1 << 20


class _ConvRecipe:
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
        self.band = None  # output rows a band of the columns path holds, where it works by bands
        if self.path == "columns" and group == 1 and len(g.kernel) == 2 and m <= _BAND_CHANNELS:
            row = (prod(g.kernel) * c + 1) * g.out[1] * self.dtype.itemsize  # a row's columns
            if row * g.out[0] > _BAND_FROM:
                self.band = min(g.out[0], max(1, _BAND_BYTES // row))

    def calls(self, out, x, w, b, buffers, finish=None) -> list:
        """The calls that write the convolution of x with w (and bias b, or None) into out, all
        of the recipe's shapes and dtype; ``buffers`` gives the scratch arrays (``_Buffers``).
        ``finish(part)``, when given, makes the calls of an elementwise op applied in place to
        a part of out once it holds its sums and bias (``_Epilogue``): the rows path finishes
        each chunk of channels while it is in cache, the others each image or all of out."""
        if b is not None and b.shape != (self.w_shape[0],):  # the compiled loops index it unchecked
            raise ShapeError(f"Conv: a bias of shape {b.shape} for {self.w_shape[0]} output channels")
        shared = np.may_share_memory(out, x)  # the planned output may reuse the input's memory
        if self.path in ("rows", "last", "direct"):  # these copy all the input before writing
            return getattr(self, self.path)(out, x, w, b, buffers, shared, finish)
        calls = []
        banded = self.band is not None and _loops() is not None and x.flags.c_contiguous
        # the columns and taps paths copy all of an image (into the column matrix, the padded
        # buffer) before they write its result: one image needs no copy of its own
        if shared and (banded or not (self.path in ("columns", "taps") and self.x_shape[0] == 1)):
            copy = buffers.get(("input",), self.x_shape, self.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        if banded:
            return calls + self.banded(out, x, w, b, buffers, finish)
        calls += getattr(self, self.path)(out, x, w, b, buffers)
        return calls + (finish(out) if finish is not None else [])

    def bias_in_product(self, bias: bool) -> bool:
        """Whether the bias is a column of the weights times a row of ones under the operand, in
        the product, rather than a pass over the output after it: for one group, on the columns
        path (its column matrix is copied anyway; the row of ones stays) and on the pointwise
        path with fewer input than output channels (MobileNets' expanding convs), where copying
        the input above a row of ones costs less than a pass over the output (24 -> 144
        channels on 56 x 56: 452 -> 359 us). The bias is then summed inside the product, so the
        recipe's results differ from a product and an add in the last bits, the same in the
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
        small = cols.size <= _NUMPY_COLUMNS
        loops = _loops() if len(g.kernel) == 2 and not small else None
        (sh, sw), (dh, dw) = g.strides, g.dilations
        for i in range(n):
            if loops is not None and x[i].flags.c_contiguous:  # the windows straight from the image, one pass
                calls.append(
                    functools.partial(loops.im2col, x[i], cols, sh, sw, g.begin[0], g.begin[1], dh, dw)
                )
            elif g.strides == (1, 1) or small:
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

    def banded(self, out, x, w, b, buffers, finish) -> list:
        """The columns path by bands of ``self.band`` output rows: per band its column matrix
        (``loops.im2col`` of the rows it reads, the bias's row of ones below), its product into
        that band of out, then the epilogue on the band while it is in cache."""
        g = self.g
        n, c = self.x_shape[:2]
        m = self.w_shape[0]
        size = prod(g.kernel) * c
        (oh, ow), (sh, sw), (dh, dw) = g.out, g.strides, g.dilations
        calls = []
        weights = w.reshape(m, size) if b is None else _with_bias(w.reshape(m, size), b, calls)
        extra = 0 if b is None else 1
        im2col = _loops().im2col
        for i in range(n):
            flat = out[i].reshape(m, oh * ow)
            for r0 in range(0, oh, self.band):
                r1 = min(oh, r0 + self.band)
                operand = buffers.get(("band",), (size + extra, (r1 - r0) * ow), self.dtype, fill=1)
                cols = operand[:size].reshape((c,) + g.kernel + (r1 - r0, ow))
                top = g.begin[0] - r0 * sh  # the band's first output row reads input row r0 * sh - top
                calls.append(functools.partial(im2col, x[i], cols, sh, sw, top, g.begin[1], dh, dw))
                calls.append(functools.partial(np.matmul, weights, operand, flat[:, r0 * ow : r1 * ow]))
                if finish is not None:
                    calls.extend(finish(out[i, :, r0:r1]))
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


def _recipe_for(op: str, attrs: dict, x_shape: tuple, w_shape: tuple, dtype) -> _ConvRecipe | None:
    """The recipe of a 2-D convolution of these shapes, dtype and Conv attributes (kernel_shape,
    auto_pad, dilations, pads, strides, group); None where they do not fit together."""
    try:
        g = _geometry(
            op,
            x_shape,
            attrs["kernel_shape"] or w_shape[2:],
            attrs["auto_pad"],
            attrs["dilations"],
            attrs["pads"],
            attrs["strides"],
        )
        return _ConvRecipe(x_shape, w_shape, dtype, g, attrs["group"])
    except (ShapeError, ValueError, TypeError):
        return None


@functools.lru_cache(maxsize=256)
def _recipe(x_shape, w_shape, dtype, g: _Geom, group: int) -> _ConvRecipe:
    return _ConvRecipe(x_shape, w_shape, dtype, g, group)


def _conv_by_recipe(x, w, b, g: _Geom, group: int, dest=None):
    """The 2-D convolution of x with w (plus b) by its recipe, into ``dest`` when given."""
    recipe = _recipe(x.shape, w.shape, x.dtype, g, group)
    out = dest if dest is not None else np.empty(recipe.out_shape, x.dtype)
    _run_calls(recipe.calls(out, np.ascontiguousarray(x), np.ascontiguousarray(w), b, _thread_buffers()))
    return out
