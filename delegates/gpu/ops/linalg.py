"""MatMul and Gemm as strided GEMM calls: ``kernels_cl/matmul.cl`` unless the builder has its own.

A backend with a vendor BLAS (CUDA: cuBLAS) gives its builder a ``gemm(call)`` method; the others
run the tiled local-memory kernel.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, broadcast_strides, pad, source

_F32 = frozenset({DataType.FLOAT})
TILE = 16
TILES = (8, 16, 32)  # square tile edges matmul.cl is built with; the local size is TILE x TILE


def tile_for(b: Builder, g: GemmCall) -> int:
    """The tile edge for ``g``: the largest of TILES up to TILE that the device's work-groups hold,
    or, with the compile spec tuning=quick, the fastest of those they hold, timed once per device
    and problem (the builder caches the choice). The kernel sums k in the same order whatever the
    tile, so the choice never changes a result."""
    limit = getattr(b, "max_local_size", TILE * TILE)
    fits = [t for t in TILES if t * t <= limit] or [1]
    if getattr(b, "tuning", "none") != "quick" or len(fits) == 1:
        return max([t for t in fits if t <= TILE] or fits[:1])
    key = f"gemm:{g.M}x{g.N}x{g.K}:{g.sam},{g.sak},{g.sbk},{g.sbn}"
    return b.tuned(key, fits, lambda t: b.time(*_gemm_launch(b, g, t)))

CAPS = {"MatMul": OpCapability(_F32, max_rank=6), "Gemm": OpCapability(_F32, max_rank=2)}


def _check_matmul(op) -> Support | None:
    if any(v.type.rank < 2 for v in op.inputs):
        return Support(False, "MatMul of a 1-D operand is not supported")
    return None


CHECKS = {"MatMul": _check_matmul}


@dataclass(frozen=True)
class GemmCall:
    """C[c_off + m*N + n] = alpha * sum_k A(m, k) B(k, n) + beta * bias(m, n), float32.

    A(m, k) = A[a_off + m*sam + k*sak], B(k, n) = B[b_off + k*sbk + n*sbn],
    bias(m, n) = bias[m*scm + n*scn] when ``bias`` is not None."""

    M: int
    N: int
    K: int
    a: int
    a_off: int
    sam: int
    sak: int
    b: int
    b_off: int
    sbk: int
    sbn: int
    c: int
    c_off: int
    bias: int | None = None
    scm: int = 0
    scn: int = 0
    alpha: float = 1.0
    beta: float = 0.0


def calls(b: Builder, step: dict) -> list[GemmCall]:
    """The GEMM calls of a MatMul (one per broadcast batch) or a Gemm step."""
    attrs = step["attributes"]
    a, w, *rest = step["inputs"]
    c = rest[0] if rest else None
    (out,) = step["outputs"]
    sa, sb, so = b.shape(a), b.shape(w), b.shape(out)
    if step["type"] == "Gemm":
        ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
        M, K = (sa[1], sa[0]) if ta else sa
        N = sb[0] if tb else sb[1]
        sam, sak = (1, sa[1]) if ta else (sa[1], 1)
        sbk, sbn = (1, sb[1]) if tb else (sb[1], 1)
        scm, scn = pad(broadcast_strides(b.shape(c), (M, N)), 0)[-2:] if c is not None else (0, 0)
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        return [GemmCall(M, N, K, a, 0, sam, sak, w, 0, sbk, sbn, out, 0, c, scm, scn, alpha, beta)]
    M, K, N = sa[-2], sa[-1], sb[-1]
    batch = so[:-2]
    a_str = broadcast_strides(sa[:-2], batch)
    b_str = broadcast_strides(sb[:-2], batch)
    result = []
    for k, idx in enumerate(itertools.product(*(range(d) for d in batch))):
        a_off = M * K * sum(i * s for i, s in zip(idx, a_str))
        b_off = K * N * sum(i * s for i, s in zip(idx, b_str))
        result.append(GemmCall(M, N, K, a, a_off, K, 1, w, b_off, N, 1, out, k * M * N))
    return result


def _gemm_launch(b: Builder, g: GemmCall, ts: int) -> tuple:
    """(program, kernel, global size, local size, args) of ``g`` with tiles of edge ``ts``."""
    program = b.program(source("matmul.cl"), f"-DTS={ts}")
    i32 = np.int32
    bias = Buf(g.bias) if g.bias is not None else Buf(g.c)
    args = [i32(g.M), i32(g.N), i32(g.K), Buf(g.a), i32(g.a_off), i32(g.sam), i32(g.sak)]
    args += [Buf(g.b), i32(g.b_off), i32(g.sbk), i32(g.sbn), Buf(g.c), i32(g.c_off)]
    args += [bias, i32(g.bias is not None), i32(g.scm), i32(g.scn), np.float32(g.alpha), np.float32(g.beta)]
    gs = (-(-g.N // ts) * ts, -(-g.M // ts) * ts)
    return program, "gemm", gs, (ts, ts), args


def gemm_kernel(b: Builder, g: GemmCall) -> None:
    """One GEMM call as a launch of the tiled kernel (local tile x tile, see ``tile_for``)."""
    if g.M * g.N == 0:
        return
    b.launch(*_gemm_launch(b, g, tile_for(b, g)))


def launch(b: Builder, step: dict) -> None:
    run = getattr(b, "gemm", None) or (lambda g: gemm_kernel(b, g))
    for g in calls(b, step):
        run(g)


LAUNCH = dict.fromkeys(CAPS, launch)
