"""MatMul and Gemm as strided GEMM calls: ``kernels_cl/matmul.cl`` unless the builder has its own.

A backend with a vendor BLAS (CUDA: cuBLAS) gives its builder a ``gemm(call)`` method; the others
run a matmul.cl kernel chosen per device kind and shape (``variant_for``). On a GPU: tiles in
local memory, register-blocked for large blocks. On a CPU device (PoCL), where local memory is
ordinary memory and a work-group runs as a loop on one core: A and B packed into contiguous
panels, then a work-item per 6 x 16 block with its accumulators in vector registers.

1024³ float32 on PoCL (2 cores, same process as numpy): the packed kernel 95-99 GFLOP/s, numpy's
OpenBLAS 150-155 (0.62-0.64x); the register-blocked GPU kernel 12 (0.09x).

A constant operand (conv weights, a fully connected layer's B) is packed once on the host at init
(``pack_a`` / ``pack_b``, what the pack kernels compute) rather than on every run, and one row
times a constant B (a fully connected layer at batch 1) runs the packed kernel with RM = 1, a
GEMV reading B's panels once. AlexNet on PoCL, whose three fully connected layers repacked their
58 million weights on every run: all its 11 GEMM launches together 33 ms a run after this (device
profile; the whole run 670 ms before, against onnxruntime's 172 in the same process).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, Scratch, broadcast_strides, options, pad, source

_F32 = frozenset({DataType.FLOAT})
# The kernels of matmul.cl: name → (kernel, tile edge, work-items per group). The tile edge of
# a packed variant is its rows per work-item (RM); its columns are 16.
VARIANTS = {
    "naive": ("gemm_naive", 0, 1),
    "tile8": ("gemm", 8, 64),
    "tile16": ("gemm", 16, 256),
    "tile32": ("gemm", 32, 1024),
    "blocked": ("gemm_blocked", 64, 256),
    "blocked8": ("gemm_blocked", 128, 256),
    "packed1": ("gemm_packed", 1, 1),
    "packed4": ("gemm_packed", 4, 1),
    "packed6": ("gemm_packed", 6, 1),
}
# The variants made for a CPU device; a GPU runs the others (one work-item per group idles it).
CPU_VARIANTS = ("packed1", "packed4", "packed6")


def variant_for(b: Builder, g: GemmCall) -> str:
    """The matmul.cl kernel for ``g``: by device kind and shape, or, with the compile spec
    tuning=quick, the fastest of those made for the device's kind that its work-groups hold, timed
    once per device and problem (the builder caches the choice). Every variant sums k in the same
    order, so the choice never changes a result.

    By shape on a GPU: one output per work-item for a few rows, register blocking for large
    blocks, 16 x 16 tiles between. On a CPU (the builder's ``device_kind`` is "cpu"): the packed
    6 x 16 kernel from 8 rows and 8 columns up (and for a B packed by its producer), the 1 x 16
    one for a single row times a constant B, one output per work-item below."""
    limit = getattr(b, "max_local_size", 256)
    cpu = getattr(b, "device_kind", "gpu") == "cpu"
    fits = [v for v, (_, _, size) in VARIANTS.items() if size <= limit and (v in CPU_VARIANTS) == cpu]
    if cpu and not g.b_packed:
        fits.append("naive")
    if getattr(b, "tuning", "none") == "quick" and len(fits) > 1:
        key = f"gemm:{g.M}x{g.N}x{g.K}:{g.sam},{g.sak},{g.sbk},{g.sbn}" + (":packed" if g.b_packed else "")
        key += f":batch{g.batch}" if g.batch > 1 else ""
        return b.tuned(key, fits, lambda v: sum(b.time(*launch) for launch in _gemm_launches(b, g, v)))
    if cpu:
        if g.M == 1 and (g.b_packed or (g.N >= 16 and isinstance(g.b, int) and b.const(g.b) is not None)):
            return "packed1"
        return "packed6" if g.b_packed or min(g.M, g.N) >= 8 else "naive"
    if g.M <= 4:
        return "naive"
    blocked = blocked_variant(g.M, g.N, fits)
    return blocked or next((v for v in ("tile16", "tile8") if v in fits), "naive")


def blocked_variant(m: int, n: int, fits) -> str | None:
    """The register-blocked variant ("blocked8" or "blocked") among ``fits`` for an m x n output
    on a GPU, or None where blocking does not pay off."""
    # 64 x 64 blocks pay off from about 2 blocks' worth of outputs, even when one side is below
    # 64 (ResNet's 7x7 layers: N = 49 ran 3-4x faster blocked than tiled on PoCL)
    if min(m, n) >= 32 and m * n >= 128 * 128 and "blocked8" in fits:
        return "blocked8"  # 2-2.5x the 4 x 4 blocking on PoCL from 256 x 784 up
    if min(m, n) >= 32 and m * n >= 2 * 64 * 64 and "blocked" in fits:
        return "blocked"
    return None


CAPS = {"MatMul": OpCapability(_F32, max_rank=6), "Gemm": OpCapability(_F32, max_rank=2)}


def _check_matmul(op) -> Support | None:
    if any(v.type.rank < 2 for v in op.inputs):
        return Support(False, "MatMul of a 1-D operand is not supported")
    return None


CHECKS = {"MatMul": _check_matmul}


@dataclass(frozen=True)
class GemmCall:
    """C[c_off + m*N + n] = alpha * sum_k A(m, k) B(k, n) + beta * bias(m, n), float32, for each
    of ``batch`` GEMMs (offsets stepped by the batch strides below).

    A(m, k) = A[a_off + m*sam + k*sak], B(k, n) = B[b_off + k*sbk + n*sbn],
    bias(m, n) = bias[m*scm + n*scn] when ``bias`` is not None. Operands are plan value ids, or a
    step's ``Scratch`` buffer (Conv's im2col columns)."""

    M: int
    N: int
    K: int
    a: int | Scratch
    a_off: int
    sam: int
    sak: int
    b: int | Scratch
    b_off: int
    sbk: int
    sbn: int
    c: int | Scratch
    c_off: int
    bias: int | Scratch | None = None
    scm: int = 0
    scn: int = 0
    alpha: float = 1.0
    beta: float = 0.0
    # ``b`` holds B already in the packed kernels' panels (``im2col_packed``); only a packed
    # variant runs such a call
    b_packed: bool = False
    # Relu applied to C after the bias: the activation of a Conv whose Relu the plan fused
    relu: bool = False
    # C's previous contents added after the bias, before Relu: a Conv's residual Add in place
    accumulate: bool = False
    # ``batch`` such GEMMs in one launch: GEMM t reads A from a_off + t*sab, B from b_off + t*sbb
    # and the bias from t*sbias, and writes C from c_off + t*scb (a grouped Conv's groups)
    batch: int = 1
    sab: int = 0
    sbb: int = 0
    scb: int = 0
    sbias: int = 0

    @property
    def epilogue(self) -> int:
        """matmul.cl's ``epilogue`` flags: bit 0 adds the bias, bit 2 then C's previous contents,
        bit 1 then applies Relu."""
        return int(self.bias is not None) | int(self.relu) << 1 | int(self.accumulate) << 2


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


def _operand(x: int | Scratch):
    """A GEMM operand as a launch argument: a plan value's buffer, or a step's own Scratch."""
    return x if isinstance(x, Scratch) else Buf(x)


def variant_option(variant: str) -> str:
    """The build option of a matmul.cl variant: the tiled kernel takes its tile edge, the blocked
    one its outputs per work-item and axis, the packed one its rows per work-item."""
    kernel, ts, _ = VARIANTS[variant]
    options = {"gemm": f"-DTS={ts}", "gemm_blocked": f"-DWPT={ts // 16}", "gemm_packed": f"-DRM={ts}"}
    return options.get(kernel, "")


def _host_operand(b: Builder, x, off: int, s0: int, s1: int, rows: int, cols: int, step: int = 0):
    """A function giving the [rows, cols] matrix X(r, c) = x[off + r*s0 + c*s1] of a constant
    operand as its kernels would read it (rounded to half where the plan stores ``x`` so), or None
    when ``x`` is computed."""
    value = b.const(x) if isinstance(x, int) else None
    if value is None:
        return None

    def matrix(t: int = 0) -> np.ndarray:
        """The matrix of GEMM ``t`` of a batch (``step``: the operand's batch stride)."""
        flat = np.ascontiguousarray(value, np.float32).reshape(-1)
        if hasattr(b, "storage") and b.storage(x) != np.float32:
            flat = flat.astype(b.storage(x)).astype(np.float32)
        start = off + t * step
        return np.lib.stride_tricks.as_strided(flat[start:], (rows, cols), (4 * s0, 4 * s1), writeable=False)

    return matrix


def pack_a(a: np.ndarray, rm: int) -> np.ndarray:
    """matmul.cl's gemm_pack_a on the host: Ap[(p*K + k)*RM + i] = A(p*RM + i, k), zero past M."""
    m, k = a.shape
    p = -(-m // rm)
    padded = np.zeros((p * rm, k), np.float32)
    padded[:m] = a
    return padded.reshape(p, rm, k).transpose(0, 2, 1).ravel()


def pack_b(bm: np.ndarray) -> np.ndarray:
    """matmul.cl's gemm_pack_b on the host: Bp[(q*K + k)*16 + j] = B(k, q*16 + j), zero past N."""
    k, n = bm.shape
    q = -(-n // 16)
    padded = np.zeros((k, q * 16), np.float32)
    padded[:, :n] = bm
    return padded.reshape(k, q, 16).transpose(1, 0, 2).ravel()


def _packed_launches(b: Builder, g: GemmCall, rm: int, program) -> list[tuple]:
    """pack A, pack B, the packed kernel: the launches of ``g`` by a packed variant. The panels are
    float32 scratch buffers of the step (zero-padded to whole panels), shared by its GEMM calls.

    A constant operand (a conv's weights, a fully connected layer's B) is packed once on the host
    instead (``host_constant``: uploaded at init with the other constants), and a B the caller
    packed already (``b_packed``: Conv's ``im2col_packed``) is read as it is. AlexNet on PoCL: its
    three fully connected layers spent most of their time repacking B on every run."""
    i32 = np.int32
    p, q = -(-g.M // rm), -(-g.N // 16)
    launches = []
    host = getattr(b, "host_constant", None)
    n = g.batch
    a_host = _host_operand(b, g.a, g.a_off, g.sam, g.sak, g.M, g.K, g.sab) if host else None
    if a_host is not None:
        key = ("gemm_a", g.a, g.a_off, g.sam, g.sak, g.M, g.K, rm, n, g.sab)
        a_panels = Buf(host(key, lambda: np.concatenate([pack_a(a_host(t), rm) for t in range(n)])))
    else:
        a_panels = Scratch(4 * n * p * rm * g.K, "gemm_a")
        args = [i32(g.M), i32(g.K), _operand(g.a), i32(g.a_off), i32(g.sam), i32(g.sak), a_panels, i32(g.sab)]
        launches.append((program, "gemm_pack_a", (-(-g.K // 64), p, n), None, args))  # 64: PACK_K
    b_host = None
    if not g.b_packed and host:
        b_host = _host_operand(b, g.b, g.b_off, g.sbk, g.sbn, g.K, g.N, g.sbb)
    if g.b_packed:
        b_panels = _operand(g.b)
    elif b_host is not None:
        key = ("gemm_b", g.b, g.b_off, g.sbk, g.sbn, g.K, g.N, n, g.sbb)
        b_panels = Buf(host(key, lambda: np.concatenate([pack_b(b_host(t)) for t in range(n)])))
    else:
        b_panels = Scratch(4 * n * q * 16 * g.K, "gemm_b")
        args = [i32(g.N), i32(g.K), _operand(g.b), i32(g.b_off), i32(g.sbk), i32(g.sbn), b_panels, i32(g.sbb)]
        launches.append((program, "gemm_pack_b", (g.K, q, n), None, args))
    bias = _operand(g.bias) if g.bias is not None else _operand(g.c)
    args = [i32(g.M), i32(g.N), i32(g.K), a_panels, b_panels, _operand(g.c), i32(g.c_off)]
    args += [bias, i32(g.epilogue), i32(g.scm), i32(g.scn), np.float32(g.alpha), np.float32(g.beta)]
    args += [i32(g.scb), i32(g.sbias)]
    launches.append((program, "gemm_packed", (q, p, n), (1, 1, 1), args))
    return launches


def _gemm_launches(b: Builder, g: GemmCall, variant: str) -> list[tuple]:
    """The launches, each (program, kernel, global size, local size, args), of ``g`` run by
    ``variant``: one, or three for a packed variant."""
    kernel, ts, _ = VARIANTS[variant]
    program = b.program(source("matmul.cl"), options(b, variant_option(variant)))
    if kernel == "gemm_packed":
        return _packed_launches(b, g, ts, program)
    i32 = np.int32
    bias = _operand(g.bias) if g.bias is not None else _operand(g.c)
    args = [i32(g.M), i32(g.N), i32(g.K), _operand(g.a), i32(g.a_off), i32(g.sam), i32(g.sak)]
    args += [_operand(g.b), i32(g.b_off), i32(g.sbk), i32(g.sbn), _operand(g.c), i32(g.c_off)]
    args += [bias, i32(g.epilogue), i32(g.scm), i32(g.scn), np.float32(g.alpha), np.float32(g.beta)]
    args += [i32(g.sab), i32(g.sbb), i32(g.scb), i32(g.sbias)]
    if kernel == "gemm_naive":
        return [(program, kernel, (g.N, g.M, g.batch), None, args)]
    up = lambda n: -(-n // ts) * ts  # noqa: E731
    if kernel == "gemm_blocked":  # a block of ts x ts per 16 x 16 work-items
        wpt = ts // 16
        return [(program, kernel, (up(g.N) // wpt, up(g.M) // wpt, g.batch), (16, 16, 1), args)]
    return [(program, kernel, (up(g.N), up(g.M), g.batch), (ts, ts, 1), args)]


def gemm_kernel(b: Builder, g: GemmCall) -> None:
    """One GEMM call as matmul.cl launches (see ``variant_for``)."""
    if g.M * g.N == 0:
        return
    for launch in _gemm_launches(b, g, variant_for(b, g)):
        b.launch(*launch)


def launch(b: Builder, step: dict) -> None:
    run = getattr(b, "gemm", None) or (lambda g: gemm_kernel(b, g))
    for g in calls(b, step):
        run(g)


LAUNCH = dict.fromkeys(CAPS, launch)
