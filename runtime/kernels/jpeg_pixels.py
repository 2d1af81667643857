"""JPEG's pixel stages, in the integer arithmetic of the IJG decoder that Pillow links.

ONNX's reference ImageDecoder decodes with Pillow, which uses libjpeg(-turbo) with its defaults:
the accurate integer inverse DCT (the Loeffler-Ligtenberg-Moschytz factorisation in 13-bit fixed
point, two passes with 2 extra bits between them), "fancy" triangular chroma upsampling for
2x1 and 2x2 subsampling, and a fixed-point YCbCr -> RGB conversion with 16 fraction bits. The
functions here compute the same integers with numpy over every block at once, so a decoded image
equals Pillow's bit for bit.
"""

from __future__ import annotations

import numpy as np

# 13-bit fixed-point multipliers of the inverse DCT's rotations: round(c * 2^13).
_F0298, _F0390, _F0541, _F0765 = 2446, 3196, 4433, 6270
_F0899, _F1175, _F1501, _F1847 = 7373, 9633, 12299, 15137
_F1961, _F2053, _F2562, _F3072 = 16069, 16819, 20995, 25172
_CONST_BITS, _PASS1_BITS = 13, 2


def _idct_1d(x, shift: int):
    """One 8-point pass over ``x[0..7]`` (arrays), results descaled by ``shift`` bits."""
    z1 = (x[2] + x[6]) * _F0541
    t2 = z1 - x[6] * _F1847
    t3 = z1 + x[2] * _F0765
    t0 = (x[0] + x[4]) << _CONST_BITS
    t1 = (x[0] - x[4]) << _CONST_BITS
    e = (t0 + t3, t1 + t2, t1 - t2, t0 - t3)
    o0, o1, o2, o3 = x[7], x[5], x[3], x[1]
    z1, z2, z3, z4 = o0 + o3, o1 + o2, o0 + o2, o1 + o3
    z5 = (z3 + z4) * _F1175
    z1, z2 = z1 * -_F0899, z2 * -_F2562
    z3, z4 = z3 * -_F1961 + z5, z4 * -_F0390 + z5
    o0 = o0 * _F0298 + z1 + z3
    o1 = o1 * _F2053 + z2 + z4
    o2 = o2 * _F3072 + z2 + z3
    o3 = o3 * _F1501 + z1 + z4
    half = 1 << (shift - 1)
    odd = (o3, o2, o1, o0)
    out = [None] * 8
    for k in range(4):
        out[k] = (e[k] + odd[k] + half) >> shift
        out[7 - k] = (e[k] - odd[k] + half) >> shift
    return out


def idct_blocks(coefs: np.ndarray, quant: np.ndarray) -> np.ndarray:
    """Dequantize and inverse-transform blocks: (..., 64) natural-order coefficients and a
    natural-order table -> (..., 8, 8) uint8 samples."""
    c = (coefs.astype(np.int64) * quant.astype(np.int64)).reshape(*coefs.shape[:-1], 8, 8)
    cols = _idct_1d([c[..., k, :] for k in range(8)], _CONST_BITS - _PASS1_BITS)  # down each column
    ws = np.stack(cols, axis=-2)
    rows = _idct_1d([ws[..., k] for k in range(8)], _CONST_BITS + _PASS1_BITS + 3)  # along each row
    v = np.stack(rows, axis=-1)
    # The IJG range limit: the value + 128, clamped, after a 10-bit wrap (index & 1023).
    i = v & 1023
    return np.where(i < 128, i + 128, np.where(i < 512, 255, np.where(i < 896, 0, i - 896))).astype(np.uint8)


def assemble(blocks: np.ndarray) -> np.ndarray:
    """(rows, cols, 8, 8) blocks -> one (rows*8, cols*8) plane."""
    r, c = blocks.shape[:2]
    return blocks.transpose(0, 2, 1, 3).reshape(r * 8, c * 8)


def _fancy_h2(p: np.ndarray, near: int, lo: int, hi: int, shift: int) -> np.ndarray:
    """Double the width: each sample becomes (near*s + left + lo, near*s + right + hi) >> shift,
    the edge columns repeated."""
    s = p.astype(np.int32)
    padded = np.concatenate([s[:, :1], s, s[:, -1:]], axis=1)
    out = np.empty((s.shape[0], s.shape[1] * 2), np.int32)
    out[:, 0::2] = (near * s + padded[:, :-2] + lo) >> shift
    out[:, 1::2] = (near * s + padded[:, 2:] + hi) >> shift
    return out


def upsample(plane: np.ndarray, fh: int, fv: int) -> np.ndarray:
    """A chroma plane (its own sample grid) brought to the luma grid: factors (fh, fv) of 1 or 2.

    2x1 weighs the nearer sample 3/4 and the farther 1/4 with rounding +1 / +2; 2x2 first sums
    3·nearer row + farther row, then does the same across columns in sixteenths (+8 / +7).
    Planes 2 samples wide or less are repeated instead, as the IJG decoder does."""
    if fh == 1 and fv == 1:
        return plane
    if plane.shape[1] <= 2:
        return np.repeat(np.repeat(plane, fh, axis=1), fv, axis=0)
    if fv == 1:
        return _fancy_h2(plane, 3, 1, 2, 2).astype(np.uint8)
    s = plane.astype(np.int32)
    padded = np.concatenate([s[:1], s, s[-1:]], axis=0)
    above = 3 * s + padded[:-2]
    below = 3 * s + padded[2:]
    out = np.empty((s.shape[0] * 2, s.shape[1] * 2), np.int32)
    out[0::2] = _fancy_h2(above, 3, 8, 7, 4)
    out[1::2] = _fancy_h2(below, 3, 8, 7, 4)
    return out.astype(np.uint8)


def _fix(x: float) -> int:
    return int(x * 65536 + 0.5)


_X = np.arange(256, dtype=np.int64) - 128
_CR_R = (_fix(1.40200) * _X + 32768) >> 16
_CB_B = (_fix(1.77200) * _X + 32768) >> 16
_CR_G = -_fix(0.71414) * _X
_CB_G = -_fix(0.34414) * _X + 32768


def ycbcr_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """uint8 planes -> (H, W, 3) uint8 RGB by the IJG tables."""
    y = y.astype(np.int64)
    r = y + _CR_R[cr]
    g = y + ((_CB_G[cb] + _CR_G[cr]) >> 16)
    b = y + _CB_B[cb]
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)
