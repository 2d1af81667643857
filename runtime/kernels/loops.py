"""Compiled loops (numba) for what numpy can only compute in many passes over memory: depthwise
convolutions (``depthwise``, ``depthwise_last``), a convolution's column matrix (``im2col``),
HardSigmoid and HardSwish (``hard_sigmoid``), erf (``erf``: numpy has none; a numpy series
takes 45 passes over the array) and PRelu with one slope per channel (``prelu``, one pass for
numpy's six), one axis of a Resize (``resample``, ``resample_last``: one pass for two per
tap), float32 erf, GELU, exp, sigmoid and tanh (``erf32``, ``gelu32``, ``exp32``, ``sigmoid32``,
``tanh32``: their numpy twins are in approximations.py), 8-bit quantization (``quantize8``,
``dynamic_quantize8``, ``dequantize8``; from quantize_loops.py both as one pass,
``quantize_dequantize8``), int8 convolutions and products, and, from pool_loops.py, 2-D max and
average pools (``pool2d``), from int8_nhwc_loops.py, an int8 depthwise convolution of a
channels-last input (``int8_depthwise_nhwc``), from spread_loops.py, a ConvTranspose's taps
spread to their places (``spread_taps``), and, from add_loops.py, an Add with the Relu or PRelu
after it (``add_relu``, ``add_prelu``). Each does the operations of the numpy calls it replaces (or
its twin's), in their order, so that its results are theirs (tests/runtime/test_loops.py).

A depthwise convolution does a few multiply-adds per float it loads (9 for a 3 x 3 kernel);
numpy computes it with one pass over the whole map per tap (``conv_recipe._ConvRecipe.rows``) or one
einsum per stride phase after a transposing copy (``last``): 0.2-1 ns a multiply-add on the
2-core benchmark machine, where onnxruntime's MLAS needs 0.07-0.11. ``depthwise`` below works
one channel at a time: the channel's padded stride phases and its accumulator (a few KB to a
few tens of KB) stay in the L1/L2 cache across all the taps, each tap is one contiguous loop
that the compiler vectorizes, and the bias is added on the copy out.

Only imported through ``_util.compiled_loops()`` (numba takes 0.4 s to import and compiles each
function on its first call of each dtype; ``cache=True`` keeps the machine code on disk for the
next process). ``fastmath`` stays off: every multiply and add rounds as numpy's do, each output
sums its taps in the weights' order, and the results do not depend on how the loops vectorize.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ._coefficients import (
    ERF_P,
    ERF_Q,
    EXP_HI,
    EXP_LO,
    EXP_TAYLOR,
    F32,
    GELU_SCALE,
    LN2_HI,
    LN2_LO,
    LOG2E,
    TANH_P,
    TANH_SPLIT,
)
from ._loop_blocks import _BLOCK, _same_memory
from .add_loops import add_prelu, add_relu  # noqa: F401 - reached as compiled_loops().add_relu
from .int8_nhwc_loops import int8_depthwise_nhwc  # noqa: F401 - reached as compiled_loops().int8_depthwise_nhwc
from .pool_loops import pool2d  # noqa: F401 - reached as compiled_loops().pool2d
from .quantize_loops import quantize_dequantize8  # noqa: F401 - reached as compiled_loops().quantize_dequantize8
from .spread_loops import spread_taps  # noqa: F401 - reached as compiled_loops().spread_taps


@njit(cache=True, nogil=True, inline="always")
def _taps3x3(acc, phases, w, run, sh, sw, dh, dw, plane, wph):  # pragma: no cover - compiled
    """acc[:run] = a 3 x 3 kernel's nine products summed in the weights' order, in one loop:
    each input float loaded once per tap, the sums never loaded (0.58-0.87x the time of a loop
    per tap on MobileNetV2's layers, the same sums)."""
    r0 = 0
    r1 = dh % sh * sw * plane + dh // sh * wph
    r2 = (2 * dh) % sh * sw * plane + (2 * dh) // sh * wph
    c1 = dw % sw * plane + dw // sw
    c2 = (2 * dw) % sw * plane + (2 * dw) // sw
    s00, s01, s02 = phases[r0:], phases[r0 + c1 :], phases[r0 + c2 :]
    s10, s11, s12 = phases[r1:], phases[r1 + c1 :], phases[r1 + c2 :]
    s20, s21, s22 = phases[r2:], phases[r2 + c1 :], phases[r2 + c2 :]
    w00, w01, w02 = w[0, 0], w[0, 1], w[0, 2]
    w10, w11, w12 = w[1, 0], w[1, 1], w[1, 2]
    w20, w21, w22 = w[2, 0], w[2, 1], w[2, 2]
    for t in range(run):
        acc[t] = (
            s00[t] * w00
            + s01[t] * w01
            + s02[t] * w02
            + s10[t] * w10
            + s11[t] * w11
            + s12[t] * w12
            + s20[t] * w20
            + s21[t] * w21
            + s22[t] * w22
        )


@njit(cache=True, nogil=True, inline="always")
def _row_taps5(acc, phases, w, run, row, sw, dw, plane, first):  # pragma: no cover - compiled
    """A kernel row of five taps (weights w) added to acc[:run] in their order in one loop (the
    row's first products start the sums where ``first``)."""
    s0 = phases[row:]
    s1 = phases[row + dw % sw * plane + dw // sw :]
    s2 = phases[row + (2 * dw) % sw * plane + (2 * dw) // sw :]
    s3 = phases[row + (3 * dw) % sw * plane + (3 * dw) // sw :]
    s4 = phases[row + (4 * dw) % sw * plane + (4 * dw) // sw :]
    w0, w1, w2, w3, w4 = w[0], w[1], w[2], w[3], w[4]
    if first:
        for t in range(run):
            acc[t] = s0[t] * w0 + s1[t] * w1 + s2[t] * w2 + s3[t] * w3 + s4[t] * w4
    else:
        for t in range(run):
            acc[t] = acc[t] + s0[t] * w0 + s1[t] * w1 + s2[t] * w2 + s3[t] * w3 + s4[t] * w4


@njit(cache=True, nogil=True)
def depthwise(x, w, b, out, sh, sw, top, left, dh, dw):  # pragma: no cover - compiled
    """out[c] = the correlation of x[c] (C, H, W) with w[c] (C, KH, KW), plus b[c] where b has
    C values (none where it has 0), at strides (sh, sw), zero padding ``top`` rows above and
    ``left`` columns before, dilations (dh, dw); out is (C, OH, OW), all C-contiguous.

    Per channel, the padded image's stride phases are copied into one buffer (phase (a, bb)
    holds padded[a::sh, bb::sw], as Hph rows of Wph floats, Hph and Wph what the taps read);
    every tap then reads one phase at stride 1, OH rows of Wph floats as one flat run (the
    Wph - OW columns past each output row are computed and dropped). The first tap's products
    start the sums, the others are added in the weights' order: all nine taps of a 3 x 3 kernel
    in one loop, a row of five at a time, else one loop per tap; the buffer's border is zeroed
    once and only its interior is written, channel after channel."""
    channels, h, wd = x.shape
    kh, kw = w.shape[1], w.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    hph = (kh - 1) * dh // sh + oh
    wph = (kw - 1) * dw // sw + ow
    plane = hph * wph
    bias = b.shape[0] > 0
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and top == 0 and left == 0 and oh == h and ow == wd:
        # one tap reading the image itself (TFLite's batch norms as 1 x 1 depthwise convs): its
        # products, then the bias, as below, without the copy into the phases and out of acc
        for c in range(channels):
            weight = w[c, 0, 0]
            value = b[c] if bias else weight
            for oy in range(oh):
                src, dst = x[c, oy], out[c, oy]
                if bias:
                    for ox in range(ow):
                        dst[ox] = src[ox] * weight + value
                else:
                    for ox in range(ow):
                        dst[ox] = src[ox] * weight
        return
    # the last tap's run reads up to Wph - 1 floats past its phase: slack after the last one
    phases = np.zeros(sh * sw * plane + wph, x.dtype)
    run = oh * wph
    acc = np.empty(run, x.dtype)
    for c in range(channels):
        for iy in range(h):
            r = iy + top
            rr = r // sh
            if rr >= hph:
                break
            row = x[c, iy]
            first = (r % sh) * sw * plane + rr * wph  # the row in phase (r % sh, 0)
            if sw == 1:  # a contiguous copy
                n = min(wd, wph - left)
                dst = phases[first + left : first + left + n]
                for t in range(n):
                    dst[t] = row[t]
            elif sw == 2:  # even and odd columns to their phases in one loop the compiler vectorizes
                even = phases[first + (left % 2) * plane + left // 2 :]
                odd = phases[first + ((left + 1) % 2) * plane + (left + 1) // 2 :]
                n_even = min((wd + 1) // 2, wph - left // 2)
                n_odd = min(wd // 2, wph - (left + 1) // 2)
                n = min(n_even, n_odd)
                for t in range(n):
                    even[t] = row[2 * t]
                    odd[t] = row[2 * t + 1]
                for t in range(n, n_even):
                    even[t] = row[2 * t]
                for t in range(n, n_odd):
                    odd[t] = row[2 * t + 1]
            else:
                for bb in range(sw):
                    ix0 = (bb - left) % sw  # the first input column in phase column bb
                    j0 = (ix0 + left) // sw
                    if ix0 >= wd or j0 >= wph:
                        continue
                    n = min((wd - 1 - ix0) // sw + 1, wph - j0)
                    dst = phases[first + bb * plane + j0 : first + bb * plane + j0 + n]
                    src = row[ix0:]
                    for t in range(n):
                        dst[t] = src[t * sw]
        if kh == 3 and kw == 3:
            _taps3x3(acc, phases, w[c], run, sh, sw, dh, dw, plane, wph)
        else:
            for ki in range(kh):
                row = (ki * dh) % sh * sw * plane + (ki * dh) // sh * wph  # where tap (ki, 0) reads
                if kw == 5:
                    _row_taps5(acc, phases, w[c, ki], run, row, sw, dw, plane, ki == 0)
                    continue
                for kj in range(kw):
                    src = phases[row + (kj * dw) % sw * plane + (kj * dw) // sw :]
                    weight = w[c, ki, kj]
                    if ki == 0 and kj == 0:
                        for t in range(run):
                            acc[t] = src[t] * weight
                    else:
                        for t in range(run):
                            acc[t] += src[t] * weight
        for oy in range(oh):
            dst = out[c, oy]
            src = acc[oy * wph :]
            if bias:
                value = b[c]
                for ox in range(ow):
                    dst[ox] = src[ox] + value
            else:
                for ox in range(ow):
                    dst[ox] = src[ox]


@njit(cache=True, nogil=True)
def depthwise_last(x, w, b, out, sh, sw, top, left, dh, dw):  # pragma: no cover - compiled
    """``depthwise`` for small outputs, with the same arguments and the same bits (each output its
    first tap's product, then the others' added in the weights' order, then the bias), computed
    channels-last: the padded image transposed to (rows, columns, C) and per output pixel and
    tap one loop over all the channels, so that the loops are long where a channel's map is
    not. Outputs of 7 x 7 (MobileNets' last layers, 576 to 960 channels): 0.56-0.79x the time
    of ``depthwise``; from 14 x 14 up it is the slower one (1.05-1.46x, 3x at 28 x 28)."""
    channels, h, wd = x.shape
    kh, kw = w.shape[1], w.shape[2]
    oh, ow = out.shape[1], out.shape[2]
    hn = (oh - 1) * sh + (kh - 1) * dh + 1
    wn = (ow - 1) * sw + (kw - 1) * dw + 1
    pad = np.zeros((hn, wn, channels), x.dtype)
    rows = min(h, hn - top)
    cols = min(wd, wn - left)
    for c0 in range(0, channels, 8):  # by 8 channels: each pixel's 8 floats written together
        for iy in range(rows):
            dst = pad[iy + top]
            for c in range(c0, min(channels, c0 + 8)):
                src = x[c, iy]
                for ix in range(cols):
                    dst[ix + left, c] = src[ix]
    taps = np.empty((kh * kw, channels), x.dtype)
    for c in range(channels):
        for ki in range(kh):
            for kj in range(kw):
                taps[ki * kw + kj, c] = w[c, ki, kj]
    acc = np.empty((oh * ow, channels), x.dtype)
    for oy in range(oh):
        for ox in range(ow):
            a = acc[oy * ow + ox]
            for ki in range(kh):
                for kj in range(kw):
                    src = pad[oy * sh + ki * dh, ox * sw + kj * dw]
                    weight = taps[ki * kw + kj]
                    if ki == 0 and kj == 0:
                        for c in range(channels):
                            a[c] = src[c] * weight[c]
                    else:
                        for c in range(channels):
                            a[c] += src[c] * weight[c]
    bias = b.shape[0] > 0
    for c in range(channels):
        for oy in range(oh):
            dst = out[c, oy]
            if bias:
                value = b[c]
                for ox in range(ow):
                    dst[ox] = acc[oy * ow + ox, c] + value
            else:
                for ox in range(ow):
                    dst[ox] = acc[oy * ow + ox, c]


@njit(cache=True, nogil=True, inline="always")
def _hard1(v, alpha, beta, zero, one, swish):  # pragma: no cover - compiled
    t = v * alpha + beta
    t = zero if t < zero else t
    t = one if t > one else t
    return t * v if swish else t


@njit(cache=True, nogil=True)
def hard_sigmoid(x, out, alpha, beta, zero, one, swish):  # pragma: no cover - compiled
    """HardSigmoid's clip(x * alpha + beta, 0, 1), times x for HardSwish (``swish``), in one pass
    where numpy makes three or four: the multiply, add, clip and multiply of
    ``elementwise._hard_passes`` in their order, each rounded as numpy rounds it (a NaN stays
    NaN). x and out are C-contiguous of one shape, out may be x (a conv's epilogue applies it in
    place: then by blocks, ``_BLOCK``; HardSwish on 64 x 48 x 48 in place took 128 us a call
    element by element, by blocks about the 27 of a call out of place); alpha, beta, zero and
    one are of their type."""
    src = x.reshape(-1)
    dst = out.reshape(-1)
    if not _same_memory(src, dst):
        for i in range(src.size):
            dst[i] = _hard1(src[i], alpha, beta, zero, one, swish)
        return
    block = np.empty(_BLOCK, dst.dtype)
    for lo in range(0, src.size, _BLOCK):
        xs, ys = src[lo : lo + _BLOCK], dst[lo : lo + _BLOCK]
        for j in range(xs.size):
            block[j] = _hard1(xs[j], alpha, beta, zero, one, swish)
        for j in range(xs.size):
            ys[j] = block[j]


@njit(cache=True, nogil=True)
def im2col(x, cols, sh, sw, top, left, dh, dw):  # pragma: no cover - compiled
    """The column matrix of a convolution: cols[c, ki, kj, oy, ox] = x[c, oy * sh + ki * dh - top,
    ox * sw + kj * dw - left], zero outside x; x is (C, H, W), cols (C, KH, KW, OH, OW), both
    C-contiguous. One pass, each row of cols written once, where numpy copies the padded image
    into its stride phases and then each tap's windows out of them (``conv_recipe._ConvRecipe.columns``):
    the same values, so the same product. At stride 1 with output rows as wide as the input's
    (``im2col_runs``) a tap's rows inside x are one run of x."""
    channels, h, wd = x.shape
    kh, kw, oh, ow = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    if sh == 1 and sw == 1 and ow == wd:
        im2col_runs(x, cols, top, left, dh, dw)
        return
    if sh == 2 and sw == 2 and kh == 2 and kw == 2 and dh == 1 and dw == 1:
        im2col_pairs(x, cols, top, left)
        return
    if sw == 2 and dw == 1 and kw > 2:
        im2col_halves(x, cols, sh, top, left, dh)
        return
    for c in range(channels):
        for ki in range(kh):
            for kj in range(kw):
                off = kj * dw - left  # the input column of output column ox: ox * sw + off
                lo = min(ow, 0 if off >= 0 else (-off + sw - 1) // sw)
                hi = max(lo, min(ow, (wd - 1 - off) // sw + 1)) if wd - 1 - off >= 0 else lo
                for oy in range(oh):
                    dst = cols[c, ki, kj, oy]
                    iy = oy * sh + ki * dh - top
                    if iy < 0 or iy >= h:
                        for t in range(ow):
                            dst[t] = 0
                        continue
                    for t in range(lo):
                        dst[t] = 0
                    for t in range(hi, ow):
                        dst[t] = 0
                    src = x[c, iy, lo * sw + off :]
                    part = dst[lo:hi]
                    if sw == 1:
                        for t in range(hi - lo):
                            part[t] = src[t]
                    elif sw == 2:
                        for t in range(hi - lo):
                            part[t] = src[2 * t]
                    else:
                        for t in range(hi - lo):
                            part[t] = src[t * sw]


@njit(cache=True, nogil=True)
def im2col_pairs(x, cols, top, left):  # pragma: no cover - compiled
    """``im2col`` of a 2 x 2 kernel at stride 2, undilated (the MediaPipe nets' downsampling
    convs): each input row feeds one output row of two taps, its even and odd columns, split
    in one loop straight into those two rows of cols (64 x 32 x 32: 53 against 140 us for a
    loop per tap and output row, on a busy machine)."""
    channels, h, wd = x.shape
    oh, ow = cols.shape[3], cols.shape[4]
    # the output columns t whose taps 2 t - left and 2 t + 1 - left both lie inside the row
    t0 = min(ow, (left + 1) // 2)
    t1 = max(t0, min(ow, (wd - 2 + left) // 2 + 1))
    for c in range(channels):
        for ki in range(2):  # rows of the padding: zeros
            for oy in range(oh):
                iy = oy * 2 + ki - top
                if iy < 0 or iy >= h:
                    for kj in range(2):
                        dst = cols[c, ki, kj, oy]
                        for t in range(ow):
                            dst[t] = 0
        for iy in range(h):
            r = iy + top
            oy = r // 2
            if oy >= oh:
                continue
            row = x[c, iy]
            d0, d1 = cols[c, r % 2, 0, oy], cols[c, r % 2, 1, oy]
            src, e0, e1 = row[2 * t0 - left :], d0[t0:], d1[t0:]
            for t in range(t1 - t0):
                e0[t] = src[2 * t]
                e1[t] = src[2 * t + 1]
            for t in range(t0):  # the columns at the edges, tap by tap
                i0 = 2 * t - left
                d0[t] = row[i0] if 0 <= i0 < wd else 0
                d1[t] = row[i0 + 1] if 0 <= i0 + 1 < wd else 0
            for t in range(t1, ow):
                i0 = 2 * t - left
                d0[t] = row[i0] if 0 <= i0 < wd else 0
                d1[t] = row[i0 + 1] if 0 <= i0 + 1 < wd else 0


@njit(cache=True, nogil=True)
def im2col_halves(x, cols, sh, top, left, dh):  # pragma: no cover - compiled
    """``im2col`` at stride 2 across with more than two taps across, undilated across (the 3 x 3
    and 5 x 5 stems of the vision nets): each input row split once into its even and odd
    columns of the padded image (zeros past the row), then every tap's row of cols one
    contiguous copy out of a half, where ``im2col`` reads every other float once per tap
    (3 x 256 x 256, 3 x 3: 0.12 against 0.22 ms; 3 x 128 x 128, 5 x 5: 0.06 against 0.11).
    With two taps across each half is copied once as it is: ``im2col`` takes those."""
    channels, h, wd = x.shape
    kh, kw, oh, ow = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    halves = ow + (kw - 1) // 2  # tap kj reads half kj % 2 from position kj // 2 on
    even = np.zeros(halves, x.dtype)  # position j: padded column 2 j, input column 2 j - left
    odd = np.zeros(halves, x.dtype)  # 2 j + 1 - left
    e0 = min(halves, (left + 1) // 2)  # the positions inside the row
    e1 = max(e0, min(halves, (wd - 1 + left) // 2 + 1))
    o0 = min(halves, left // 2)
    o1 = max(o0, min(halves, (wd - 2 + left) // 2 + 1))
    for c in range(channels):
        for ki in range(kh):  # rows of the padding: zeros
            for oy in range(oh):
                iy = oy * sh + ki * dh - top
                if iy < 0 or iy >= h:
                    for kj in range(kw):
                        dst = cols[c, ki, kj, oy]
                        for t in range(ow):
                            dst[t] = 0
        for iy in range(h):
            row = x[c, iy]
            src = row[2 * e0 - left :]
            for j in range(e1 - e0):
                even[e0 + j] = src[2 * j]
            src = row[2 * o0 + 1 - left :]
            for j in range(o1 - o0):
                odd[o0 + j] = src[2 * j]
            for ki in range(kh):  # the output rows whose tap ki reads input row iy
                r = iy + top - ki * dh
                if r < 0 or r % sh != 0 or r // sh >= oh:
                    continue
                for kj in range(kw):
                    half = even if kj % 2 == 0 else odd
                    at = kj // 2
                    dst = cols[c, ki, kj, r // sh]
                    for t in range(ow):
                        dst[t] = half[at + t]


@njit(cache=True, nogil=True)
def im2col_runs(x, cols, top, left, dh, dw):  # pragma: no cover - compiled
    """``im2col`` at stride 1 where OW = W: the rows of a tap that fall inside x are one run of
    x's channel, copied as one (audio models' maps 4 to 32 columns wide spent more time starting
    rows than copying them), then the columns past the input's edges zeroed."""
    channels, h, wd = x.shape
    kh, kw, oh, ow = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    for c in range(channels):
        image = x[c].reshape(h * wd)
        for ki in range(kh):
            r = ki * dh - top  # the input row of output row oy: oy + r
            oy0 = min(oh, max(0, -r))
            oy1 = max(oy0, min(oh, h - r))
            for kj in range(kw):
                off = kj * dw - left  # the input column of output column ox: ox + off
                lo, hi = min(ow, max(0, -off)), max(0, min(ow, wd - off))
                plane = cols[c, ki, kj].reshape(oh * ow)
                for t in range(oy0 * ow):
                    plane[t] = 0
                for t in range(oy1 * ow, oh * ow):
                    plane[t] = 0
                if oy1 == oy0:
                    continue
                d0, s0, n = oy0 * ow, (oy0 + r) * wd + off, (oy1 - oy0) * ow
                a, b = max(0, -s0), min(n, h * wd - s0)  # what the run skips is past an edge
                run, source = plane[d0 + a : d0 + b], image[s0 + a : s0 + b]
                for t in range(b - a):
                    run[t] = source[t]
                if lo > 0 or hi < ow:
                    for oy in range(oy0, oy1):
                        row = oy * ow
                        for t in range(lo):
                            plane[row + t] = 0
                        for t in range(max(lo, hi), ow):
                            plane[row + t] = 0


@njit(cache=True, nogil=True)
def erf(x, out):  # pragma: no cover - compiled
    """out[i] = erf(x[i]) in float64 (the C library's erf, within an ulp), x and out contiguous."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        ys[i] = math.erf(np.float64(xs[i]))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _erf_rational(d):  # pragma: no cover - compiled
    """erf(d) in float64 by the rational function of ERF_P / ERF_Q (Horner, highest power first,
    as ``approximations._erf_rational`` computes it: the same bits), ±1 from |d| = 4 on, NaN kept.
    Without a branch (t is clamped, the sign chosen by selects) and with numpy's error model (no
    division check: q >= 1), so that the loops calling it vectorize."""
    p0, p1, p2, p3, p4, p5, p6 = ERF_P
    q0, q1, q2, q3, q4, q5 = ERF_Q
    a = abs(d)
    t = min(a, 4.0)
    t = t * t
    p = (((((p6 * t + p5) * t + p4) * t + p3) * t + p2) * t + p1) * t + p0
    q = ((((q5 * t + q4) * t + q3) * t + q2) * t + q1) * t + q0
    e = d * p / q
    one = 1.0 if d > 0 else -1.0
    return one if a >= 4.0 else e


@njit(cache=True, nogil=True, error_model="numpy")
def erf32(x, out):  # pragma: no cover - compiled
    """out[i] = erf(x[i]) for float32 x, in float64 by ``_erf_rational``; x and out contiguous."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        ys[i] = _erf_rational(np.float64(xs[i]))


@njit(cache=True, nogil=True, error_model="numpy")
def gelu32(x, out):  # pragma: no cover - compiled
    """out[i] = 0.5 · x · (1 + erf(x / √2)) for float32 x, in float64 (one rounding to out's type):
    the argument x · GELU_SCALE, erf by ``_erf_rational``, as ``approximations._gelu_exact`` computes
    it with numpy (the same bits); x and out contiguous."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    for i in range(xs.size):
        v = np.float64(xs[i])
        ys[i] = 0.5 * v * (1.0 + _erf_rational(v * GELU_SCALE))


@intrinsic
def _float32_of_bits(typingctx, bits):
    """The float32 whose bit pattern is the low 32 bits of the integer ``bits`` (a bitcast)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = builder.trunc(args[0], ir.IntType(32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())

    return types.float32(bits), codegen


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _exp32(x):  # pragma: no cover - compiled
    """exp of a float32 in float32 arithmetic (``_coefficients``: clamp, two-part ln 2, Taylor
    polynomial of degree 7, 2^n from exponent bits), as ``approximations._exp32`` computes it with
    numpy: the same bits. Branch-free, so that the loops calling it vectorize."""
    c0, c1, c2, c3, c4, c5, c6, c7 = EXP_TAYLOR
    y = min(max(x, EXP_LO), EXP_HI)
    n = np.floor(y * LOG2E + F32(0.5))
    r = y - n * LN2_HI - n * LN2_LO
    p = ((((((c7 * r + c6) * r + c5) * r + c4) * r + c3) * r + c2) * r + c1) * r + c0
    k = np.int32(n)
    h = k >> 1
    return p * _float32_of_bits((h + 127) << 23) * _float32_of_bits((k - h + 127) << 23)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _sigmoid32(v):  # pragma: no cover - compiled
    """1 / (1 + exp(-v)) for a float32 v; 0 where -v is past exp's range, NaN kept."""
    s = F32(1.0) / (F32(1.0) + _exp32(-v))
    s = F32(0.0) if -v > EXP_HI else s
    return s if v == v else v


@njit(cache=True, nogil=True, error_model="numpy")
def sigmoid32(x, out):  # pragma: no cover - compiled
    """out[i] = sigmoid(x[i]) for float32 x in one pass (``_sigmoid32``); x and out contiguous,
    out may be x: by blocks computed into a buffer of their own, then copied out, so that both
    loops vectorize (a loop storing where it loads does not: 8 ns an element against 1.4)."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    block = np.empty(_BLOCK, np.float32)
    for lo in range(0, xs.size, _BLOCK):
        src, dst = xs[lo : lo + _BLOCK], ys[lo : lo + _BLOCK]
        for j in range(src.size):
            block[j] = _sigmoid32(src[j])
        for j in range(src.size):
            dst[j] = block[j]


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _tanh32(v):  # pragma: no cover - compiled
    """tanh of a float32 v (``_coefficients.TANH_P``): the polynomial below TANH_SPLIT, else
    1 − 2 / (exp(2|v|) + 1) with v's sign; v itself where v² underflows to 0 (the sign of a
    zero kept) and NaN. Branch-free (both computed, one chosen)."""
    p0, p1, p2, p3, p4 = TANH_P
    a = abs(v)
    z = v * v
    small = ((((p4 * z + p3) * z + p2) * z + p1) * z + p0) * z * v + v
    large = F32(1.0) - F32(2.0) / (_exp32(a + a) + F32(1.0))
    large = -large if v < F32(0.0) else large
    r = small if a < TANH_SPLIT else large
    return r if v == v and z != F32(0.0) else v  # ±0, and where x² underflows: tanh(v) is v


@njit(cache=True, nogil=True, error_model="numpy")
def tanh32(x, out):  # pragma: no cover - compiled
    """out[i] = tanh(x[i]) for float32 x in one pass (``_tanh32``); x and out contiguous, out may
    be x (by blocks, as ``sigmoid32``)."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    block = np.empty(_BLOCK, np.float32)
    for lo in range(0, xs.size, _BLOCK):
        src, dst = xs[lo : lo + _BLOCK], ys[lo : lo + _BLOCK]
        for j in range(src.size):
            block[j] = _tanh32(src[j])
        for j in range(src.size):
            dst[j] = block[j]


@njit(cache=True, nogil=True, error_model="numpy")
def exp32(x, out):  # pragma: no cover - compiled
    """out[i] = exp(x[i]) for float32 x in one pass (``_exp32``: 0 below exp's float32 range, inf
    above it, NaN kept); x and out contiguous, out may be x (by blocks, as ``sigmoid32``)."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    block = np.empty(_BLOCK, np.float32)
    for lo in range(0, xs.size, _BLOCK):
        src, dst = xs[lo : lo + _BLOCK], ys[lo : lo + _BLOCK]
        for j in range(src.size):
            v = src[j]
            e = _exp32(v)
            e = F32(0.0) if v < EXP_LO else e
            e = F32(np.inf) if v > EXP_HI else e
            block[j] = e if v == v else v
        for j in range(src.size):
            dst[j] = block[j]


@njit(cache=True, nogil=True, error_model="numpy")
def quantize8(x, scale, zero, lo, hi, out):  # pragma: no cover - compiled
    """QuantizeLinear of float32 x to 8 bits in one pass, as ``quantization._QuantizeCall``'s
    passes compute it: x / scale in float32, rounded half to even, plus the zero point, clipped
    to [lo, hi] in float32 (NaN gives 0, as numpy's conversion of it), converted; scale (float32)
    and zero (8-bit) 0-d arrays read at each call, lo and hi float32, x and out C-contiguous."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    s, z = scale[()], F32(zero[()])
    for i in range(xs.size):
        q = np.rint(xs[i] / s) + z
        q = min(max(q, lo), hi)
        ys[i] = q if q == q else F32(0.0)


@njit(cache=True, nogil=True, error_model="numpy")
def dynamic_quantize8(x, lo, hi, out, scale_out, zero_out):  # pragma: no cover - compiled
    """DynamicQuantizeLinear of float32 x (C-contiguous) into uint8 ``out`` from its min ``lo``
    and max ``hi`` (numpy's reductions), as quantization.py's kernel computes it: the range
    widened to hold 0 (a NaN bound gives 0, as Python's min(0.0, nan)), scale (hi − lo) / 255
    in float32, zero point rint(−lo / scale) clipped to [0, 255], then ``quantize8``'s steps;
    all zeros with scale 1 (onnxruntime's) where the range is 0. The scale and zero point go to
    the 0-d ``scale_out`` (float32) and ``zero_out`` (uint8)."""
    lo = lo if lo < 0 else F32(0.0)
    hi = hi if hi > 0 else F32(0.0)
    s = F32((hi - lo) / F32(255))
    xs, ys = x.reshape(-1), out.reshape(-1)
    scale_out[()] = s if s != 0 else F32(1.0)
    if s == 0:
        zero_out[()] = 0
        for i in range(ys.size):
            ys[i] = 0
        return
    z = np.rint(-lo / s)
    z = min(max(z, F32(0.0)), F32(255.0)) if z == z else F32(0.0)
    zero_out[()] = np.uint8(z)
    for i in range(xs.size):
        q = np.rint(xs[i] / s) + z
        q = min(max(q, F32(0.0)), F32(255.0))
        ys[i] = q if q == q else F32(0.0)


@njit(cache=True, nogil=True, error_model="numpy")
def dequantize8(x, scale, zero, out):  # pragma: no cover - compiled
    """DequantizeLinear of 8-bit x to float32 in one pass, as ``quantization._DequantizeCall``'s
    passes compute it: x minus the zero point (exact in float32), times the scale, rounded once;
    scale (float32) and zero (8-bit) 0-d arrays read at each call, x and out C-contiguous."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    s, z = scale[()], F32(zero[()])
    for i in range(xs.size):
        ys[i] = (F32(xs[i]) - z) * s


@njit(cache=True, nogil=True)
def prelu(x, slope, out):  # pragma: no cover - compiled
    """PRelu with a slope per channel: out[i, c, k] = x[i, c, k] · slope[c] where x < 0, else x
    itself (NaN and -0 included); x and out (outer, C, inner) C-contiguous, out may be x (then
    by blocks, ``_BLOCK``: on 64 x 48 x 48 in place 92 us a call element by element, by blocks
    about the 24 of a call out of place)."""
    n, channels, m = x.shape
    in_place = _same_memory(x, out)
    block = np.empty(_BLOCK if in_place else 0, out.dtype)
    for i in range(n):
        for c in range(channels):
            s = slope[c]
            src, dst = x[i, c], out[i, c]
            if not in_place:
                for k in range(m):
                    v = src[k]
                    dst[k] = v * s if v < 0 else v
                continue
            for lo in range(0, m, _BLOCK):
                xs, ys = src[lo : lo + _BLOCK], dst[lo : lo + _BLOCK]
                for j in range(xs.size):
                    v = xs[j]
                    block[j] = v * s if v < 0 else v
                for j in range(xs.size):
                    ys[j] = block[j]


@njit(cache=True, nogil=True)
def requantize(acc, scale, zero, lo, hi, out):  # pragma: no cover - compiled
    """XNNPACK's fp32 requantization in one pass (``tflite_int8.requantize_fp32``'s five numpy
    passes): out[i] = int8(clamp(rint(float32(acc[i]) · scale[i]) + zero, lo, hi)), each step
    rounded to float32 as numpy rounds it. acc (float64), scale (float32, one per element), out
    (int8) C-contiguous of one size; zero, lo, hi float32. Finite scales only (a NaN has no int8)."""
    a, s, o = acc.reshape(-1), scale.reshape(-1), out.reshape(-1)
    for i in range(a.size):
        v = np.rint(np.float32(a[i]) * s[i]) + zero
        v = lo if v < lo else v
        v = hi if v > hi else v
        o[i] = np.int8(v)


@njit(cache=True, nogil=True)
def widen(x, zero, out):  # pragma: no cover - compiled
    """out[i] = float64(x[i]) - zero: 8-bit integers less their zero point, exact in float64 (one
    call, 0.6 us on 576 values, against 3.5 for numpy's casting subtract); x and out of one size."""
    a, o = x.reshape(-1), out.reshape(-1)
    for i in range(a.size):
        o[i] = np.float64(a[i]) - zero


@njit(cache=True, nogil=True)
def int8_depthwise(x, w, b, scale, params, geom, out):  # pragma: no cover - compiled
    """A depthwise int8 convolution in one call, where ``widen``, ``depthwise``/``depthwise_last``
    and ``requantize`` take three (a streaming model's small maps: the calls cost more than
    their arithmetic). Per output, the float64 sum of (x - x_zero) · w over the taps inside the
    image (the padding reads x_zero: its products are 0), plus the bias, then ``requantize``'s
    float32 steps. Every product and partial sum is an integer below 2^53, so the sum is those
    calls' in any order, and the int8 result their bits. x int8 (N, C, H, W), w float64 (C, KH,
    KW), b float64 (C,) or empty, scale float32 (C,), out int8 (N, C, OH, OW); params float64
    (x_zero, y_zero, y_min, y_max); geom int64 (stride h, stride w, pad top, pad left, dilation
    h, dilation w): two arrays, not ten scalars, as each argument adds to the call's cost."""
    sh, sw, top, left, dh, dw = geom[0], geom[1], geom[2], geom[3], geom[4], geom[5]
    x_zero = params[0]
    zero, lo, hi = np.float32(params[1]), np.float32(params[2]), np.float32(params[3])
    n, channels, h, wd = x.shape
    kh, kw = w.shape[1], w.shape[2]
    oh, ow = out.shape[2], out.shape[3]
    for i in range(n):
        for c in range(channels):
            s = scale[c]
            bias = b[c] if b.size else 0.0
            for oy in range(oh):
                for ox in range(ow):
                    acc = 0.0
                    for ki in range(kh):
                        iy = oy * sh - top + ki * dh
                        if iy < 0 or iy >= h:
                            continue
                        for kj in range(kw):
                            ix = ox * sw - left + kj * dw
                            if 0 <= ix < wd:
                                acc += (np.float64(x[i, c, iy, ix]) - x_zero) * w[c, ki, kj]
                    v = np.rint(np.float32(acc + bias) * s) + zero
                    v = lo if v < lo else v
                    v = hi if v > hi else v
                    out[i, c, oy, ox] = np.int8(v)


@njit(cache=True, nogil=True)
def int8_product(x, w, b, scale, params, out):  # pragma: no cover - compiled
    """An int8 product in one call, for the small products of streaming models (a
    FullyConnected, a pointwise conv of one pixel), where ``widen``, a BLAS product, the bias's
    add and ``requantize`` take four: per output, the sum of (x - x_zero) · w in int32 (a loop
    the compiler vectorizes: 1.8 us against 3.0 in int64 on 64 x 64) plus the bias in int64,
    then ``requantize``'s float32 steps. The sum is the integer the float64 calls compute exactly
    (every partial sum is below 2^53; |product| <= 255 · 128, so K up to 65,536 cannot overflow
    int32), and converting it to float32 rounds it as converting that float64 does, so the int8
    result has their bits. x int8 (N, K), w int8 (M, K), b int32 (M,) or empty, scale float32
    (M,), out int8 (N, M); params float64 (x_zero, y_zero, y_min, y_max)."""
    x_zero = np.int32(params[0])
    zero, lo, hi = np.float32(params[1]), np.float32(params[2]), np.float32(params[3])
    n, k = x.shape
    m = w.shape[0]
    xs = np.empty(k, np.int32)
    for i in range(n):
        for j in range(k):
            xs[j] = np.int32(x[i, j]) - x_zero
        for o in range(m):
            wo = w[o]
            s = np.int32(0)
            for j in range(k):
                s = np.int32(s + np.int32(xs[j] * np.int32(wo[j])))
            acc = np.int64(s) + (np.int64(b[o]) if b.size else np.int64(0))
            v = np.rint(np.float32(acc) * scale[o]) + zero
            v = lo if v < lo else v
            v = hi if v > hi else v
            out[i, o] = np.int8(v)


@njit(cache=True, nogil=True)
def resample(x, cols, weights, out):  # pragma: no cover - compiled
    """One axis of a Resize (``tensor._resize_axis``'s numpy passes) in one: x (outer, in, inner)
    and out (outer, out, inner), C-contiguous of one float type; out[o, j] = the sum over t of
    x[o, cols[j, t]] · weights[j, t], the first product starting the sum and each later one
    added in turn, as the kernel's multiply and add of one tap after the other round."""
    outer, n_out, inner = out.shape
    taps = cols.shape[1]
    for o in range(outer):
        for j in range(n_out):
            dst = out[o, j]
            src = x[o, cols[j, 0]]
            w = weights[j, 0]
            for k in range(inner):
                dst[k] = src[k] * w
            for t in range(1, taps):
                src = x[o, cols[j, t]]
                w = weights[j, t]
                for k in range(inner):
                    dst[k] = dst[k] + src[k] * w


@njit(cache=True, nogil=True)
def resample_last(x, cols, weights, out):  # pragma: no cover - compiled
    """``resample`` of the last axis (inner 1): x (outer, in), out (outer, out), the taps
    transposed, cols and weights (taps, out). Tap after tap over a whole output row, so that
    the loops run over contiguous columns and weights (2.3-2.7x faster than ``resample`` with
    inner 1 on 128 x 32 x 16 ... 16 x 128 x 64 float32 maps, the same sums)."""
    outer, n_out = out.shape
    taps = cols.shape[0]
    for o in range(outer):
        src = x[o]
        dst = out[o]
        c, w = cols[0], weights[0]
        for j in range(n_out):
            dst[j] = src[c[j]] * w[j]
        for t in range(1, taps):
            c, w = cols[t], weights[t]
            for j in range(n_out):
                dst[j] = dst[j] + src[c[j]] * w[j]
