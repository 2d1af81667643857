"""A compiled loop (numba) that spreads a ConvTranspose's per-pixel products to their places in
the output where its windows do not overlap (``spread_taps``), re-exported by loops.py and
reached through ``_util.compiled_loops()`` like the others.

numpy's add of a transposing view takes inner loops of one window's width (2 floats for the
2 x 2, stride 2 upsampling): 25 ms for a 128 x 160 x 160 result. The loop writes the output a
row at a time from the products of one input row (which stay in the L2 cache), indexing flat
arrays by unsigned offsets (numba checks a signed index for wraparound; pool_loops.py says
more). Each output is its product plus zero, the add the kernel makes into its zeroed buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def spread_taps(products, out, kh, kw):  # pragma: no cover - compiled
    """out[m, i * kh + a, j * kw + b] = products[i * W + j, (m * kh + a) * kw + b] + 0: products
    (H * W, M * kh * kw) and out (M, H * kh, W * kw), both C-contiguous."""
    m, oh, ow = out.shape
    h, w = oh // kh, ow // kw
    taps = np.uint64(m * kh * kw)
    src, dst = products.reshape(products.size), out.reshape(out.size)
    zero = np.zeros(1, out.dtype)[0]
    for i in range(h):
        for c in range(m):
            for a in range(kh):
                row = np.uint64((c * oh + i * kh + a) * ow)
                first = np.uint64(i * w) * taps + np.uint64((c * kh + a) * kw)
                for j in range(w):
                    at = first + np.uint64(j) * taps
                    to = row + np.uint64(j * kw)
                    for b in range(kw):
                        dst[to + np.uint64(b)] = src[at + np.uint64(b)] + zero
