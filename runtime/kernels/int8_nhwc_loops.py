"""A compiled loop (numba) for an int8 depthwise convolution that reads its input channels-last
(``int8_depthwise_nhwc``), re-exported by loops.py and reached through
``_util.compiled_loops()`` like the others.

A TFLite model's depthwise convolution reads an NHWC tensor; the importer makes that explicit
with a Transpose to NCHW before the (NCHW) conv. On a streaming model's small maps (a window of
5-21 frames of 32-64 channels, one output pixel) the copy and the NCHW loop, one channel at a
time over a few taps, cost more than the arithmetic: this loop reads the Transpose's input in
place and sums each tap over all channels at once, a contiguous loop the compiler vectorizes.
Every sum is an integer (int8 products, an int32 bias), exact in int32 and int64 as in the
float64 of ``loops.int8_depthwise``, so the results are that loop's bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def int8_depthwise_nhwc(x, w, b, scale, params, geom, out):  # pragma: no cover - compiled
    """``loops.int8_depthwise`` of x given channels-last: x int8 (N, H, W, C), w int32 (KH, KW,
    C), b int64 (C,) (zeros where the op has no bias), scale float32 (C,), out int8 (N, C, OH,
    OW); params float64 (x_zero, y_zero, y_min, y_max); geom int64 (stride h, stride w, pad top,
    pad left, dilation h, dilation w). Per output, the int32 sum of (x - x_zero) · w over the taps
    inside the image (the padding reads x_zero: its products are 0), plus the bias in int64, in
    float32 times the scale, rounded to even, plus the zero point, clamped: converting the exact
    integer to float32 rounds it as converting the float64 sum of ``int8_depthwise`` does. At
    most 65,536 taps (|product| <= 255 · 128, so the int32 sums cannot overflow)."""
    sh, sw, top, left, dh, dw = geom[0], geom[1], geom[2], geom[3], geom[4], geom[5]
    x_zero = np.int32(params[0])
    zero, lo, hi = np.float32(params[1]), np.float32(params[2]), np.float32(params[3])
    n, h, wd, channels = x.shape
    kh, kw = w.shape[0], w.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    acc = np.empty(channels, np.int32)
    for i in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for c in range(channels):
                    acc[c] = 0
                y0, x0 = oy * sh - top, ox * sw - left  # the window's corner, in the padded frame
                for ki in range(kh):
                    iy = y0 + ki * dh
                    if 0 <= iy < h:
                        for kj in range(kw):
                            ix = x0 + kj * dw
                            if 0 <= ix < wd:
                                row, taps = x[i, iy, ix], w[ki, kj]
                                for c in range(channels):
                                    acc[c] += (np.int32(row[c]) - x_zero) * taps[c]
                for c in range(channels):  # no NaN here (finite scales): min and max clamp
                    v = np.rint(np.float32(np.int64(acc[c]) + b[c]) * scale[c]) + zero
                    out[i, c, oy, ox] = np.int8(min(max(v, lo), hi))
