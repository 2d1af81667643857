"""A compiled loop (numba) for an activation's QuantizeLinear → DequantizeLinear pair in one pass
(``quantize_dequantize8``), re-exported by loops.py and reached through
``_util.compiled_loops()`` like the others (``quantize_pair.QuantizePairCall`` calls it).

A quantized model written as QDQ rounds each activation to 8 bits and back to float before the
next op reads it. Run as two steps that is one pass writing the 8-bit values and one reading
them; here each value goes from x to its dequantized float in registers. The loop's time is
that of ``loops.quantize8`` alone (its float32 division bounds it): the dequantizing pass is
what the pair saves (1 x 6 x 400 x 400 floats on the 2-core benchmark machine: 224 us, against
221 + 97 for the two passes).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._coefficients import F32
from ._loop_blocks import _BLOCK  # the floats computed into a block of their own before they are stored


@njit(cache=True, nogil=True, error_model="numpy")
def quantize_dequantize8(
    x, scale, zero, lo, hi, out_scale, out_zero, out, backward
):  # pragma: no cover - compiled
    """out[i] = (q - out_zero) · out_scale, q = clip(rint(x[i] / scale) + zero, lo, hi) in
    float32 (0 for NaN): ``loops.quantize8`` then ``loops.dequantize8`` on the same values, the
    8-bit q (exact in float32) never stored. scale, out_scale (float32) and zero, out_zero
    (8-bit) 0-d arrays read at each call; lo, hi float32; x and out C-contiguous of one size.

    By blocks computed into a buffer, then copied out, so that both loops vectorize where out
    is x (a loop storing where it loads does not: 1.22 ms against 0.19 on 256 x 56 x 56
    floats). A block is read whole before it is stored, so out may also overlap x: starting
    before x, the blocks go first to last (a block stores only where blocks up to it were
    read); starting after x, ``backward``, last to first."""
    xs, ys = x.reshape(-1), out.reshape(-1)
    s, z = scale[()], F32(zero[()])
    t, w = out_scale[()], F32(out_zero[()])
    block = np.empty(_BLOCK, np.float32)
    blocks = (xs.size + _BLOCK - 1) // _BLOCK
    for b in range(blocks):
        first = (blocks - 1 - b) * _BLOCK if backward else b * _BLOCK
        src, dst = xs[first : first + _BLOCK], ys[first : first + _BLOCK]
        for j in range(src.size):
            q = np.rint(src[j] / s) + z
            q = min(max(q, lo), hi)
            q = q if q == q else F32(0.0)
            block[j] = (q - w) * t
        for j in range(src.size):
            dst[j] = block[j]
