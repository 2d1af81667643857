"""BatchNormalization (inference), Softmax / LogSoftmax, the row normalizations (Layer-, RMS-,
Instance-, GroupNormalization) and LRN: ``kernels_cl/norm.cl``.

Softmax over the innermost axis and the row normalizations run one work-group per row (WG
work-items folding max / sum / variance in local memory); Softmax over an outer axis runs one
work-item per row, so that neighbouring work-items read neighbouring elements.
RMSNormalization is LayerNormalization without the mean (``centered`` = 0) and without a bias;
LayerNormalization's Mean / InvStdDev outputs are written by the same kernel, one value per row.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Scratch, float_options, options, source

_F32 = frozenset({DataType.FLOAT})
# Work-items of one work-group of the row kernels (a power of two).
WG = 128

CAPS = {
    "BatchNormalization": OpCapability(_F32, max_rank=6, attributes={"training_mode": (0,)}),
    "Softmax": OpCapability(_F32, max_rank=MAX_RANK),
    "LogSoftmax": OpCapability(_F32, max_rank=MAX_RANK),
    "LayerNormalization": OpCapability(_F32, max_rank=MAX_RANK, attributes={"stash_type": (1,)}),
    "RMSNormalization": OpCapability(_F32, max_rank=MAX_RANK, attributes={"stash_type": (1,)}),
    "InstanceNormalization": OpCapability(_F32, max_rank=MAX_RANK),
    "GroupNormalization": OpCapability(_F32, max_rank=MAX_RANK, attributes={"stash_type": (1,)}),
    "LRN": OpCapability(_F32, max_rank=MAX_RANK),
}
# LayerNormalization may list Mean / InvStdDev outputs (float32, one value per normalized row).
MULTI_OUTPUT = ("LayerNormalization",)


def _suffix(shape, of) -> bool:
    """Whether ``shape``, leading 1s dropped, is a suffix of ``of`` (k % size indexes it)."""
    shape = list(shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    return not shape or list(of[len(of) - len(shape) :]) == shape


def check_layernorm(op) -> Support | None:
    """LayerNormalization and RMSNormalization: scale (and bias) broadcast over the rows only."""
    x = op.inputs[0]
    rank = x.type.rank
    axis = int(op.attributes.get("axis", -1))
    if not rank or not -rank <= axis < rank:
        return Support(False, f"{op.op_type} axis {axis} of a rank-{rank} input")
    normalized = tuple(x.type.shape[axis % rank :])
    for v in op.inputs[1:3]:
        if v is not None and not _suffix(v.type.shape, normalized):
            return Support(False, f"{op.op_type} scale / bias of shape {v.type.shape} for {normalized}")
    return None


def check_groupnorm(op) -> Support | None:
    x, scale = op.inputs[0], op.inputs[1]
    groups = int(op.attributes.get("num_groups", 0))
    if x.type.rank < 2 or groups <= 0 or x.type.shape[1] % groups:
        return Support(False, f"GroupNormalization of {groups} groups over shape {x.type.shape}")
    bias = op.inputs[2]
    if tuple(scale.type.shape) not in ((x.type.shape[1],), (groups,)) or bias.type.shape != scale.type.shape:
        return Support(
            False, f"GroupNormalization scale / bias of shapes {scale.type.shape}, {bias.type.shape}"
        )
    return None


def check_instancenorm(op) -> Support | None:
    if op.inputs[0].type.rank < 2:
        return Support(False, "InstanceNormalization of a tensor of rank < 2")
    return None


def check_lrn(op) -> Support | None:
    if (op.inputs[0].type.rank or 0) < 2:
        return Support(False, "LRN of an input without a channel axis")
    return None


CHECKS = {
    "LRN": check_lrn,
    "LayerNormalization": check_layernorm,
    "RMSNormalization": check_layernorm,
    "GroupNormalization": check_groupnorm,
    "InstanceNormalization": check_instancenorm,
}


def _as_read(b: Builder, v: int) -> np.ndarray | None:
    """Constant ``v`` as its kernels read it (rounded to half where stored so), or None."""
    value = b.const(v)
    if value is None:
        return None
    value = np.asarray(value, np.float32)
    storage = b.storage(v) if hasattr(b, "storage") else np.float32
    with np.errstate(over="ignore"):  # past half's range: inf, as the device stores it
        return value.astype(storage).astype(np.float32)


def _batchnorm(b: Builder, step: dict) -> None:
    """Inference BatchNormalization. With constant statistics and parameters (every exported
    model) the channel's factor a = scale / sqrt(var + eps) and offset bias - mean * a are
    computed once on the host at init and the kernel is y = x * a + b, one work-item row per
    (image, channel) plane: DenseNet-121's 124 BatchNormalizations 284 -> 105 ms on PoCL (2
    cores) against a division and a square root per element. Otherwise as ONNX writes it."""
    x, scale, bias, mean, var = step["inputs"][:5]
    (out,) = step["outputs"][:1]
    shape = b.shape(x)
    C = shape[1] if len(shape) > 1 else 1
    inner = math.prod(shape[2:])
    n = math.prod(shape)
    eps = np.float32(step["attributes"].get("epsilon", 1e-5))
    params = [_as_read(b, v) for v in (scale, bias, mean, var)]
    host = getattr(b, "host_constant", None)
    if host is not None and all(p is not None for p in params):
        s_, b_, m_, v_ = (np.broadcast_to(p.reshape(-1), (C,)) for p in params)
        a = (s_ / np.sqrt(v_ + eps)).astype(np.float32)
        shift = (b_ - m_ * a).astype(np.float32)
        key = ("batchnorm", scale, bias, mean, var, float(eps))
        factors = host(key, lambda: np.concatenate([a, shift]))
        args = [Buf(x), Buf(factors), Buf(out), np.int32(C), np.int32(inner), np.int32(n // max(inner, 1))]
        program = b.program(source("norm.cl"), float_options(b))
        b.launch(program, "scale_shift", (inner, n // max(inner, 1)), None, args)
        return
    args = [Buf(x), Buf(scale), Buf(bias), Buf(mean), Buf(var), Buf(out)]
    args += [np.int32(n), np.int32(C), np.int32(inner), eps]
    b.launch(b.program(source("norm.cl"), float_options(b)), "batchnorm", (n,), None, args)


def _softmax(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    shape = b.shape(x) or (1,)  # a scalar: softmax of one element
    axis = int(step["attributes"].get("axis", -1)) % len(shape)
    outer, L, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    program = b.program(source("norm.cl"), options(b, f"-DWG={WG}"))
    is_log = np.int32(step["type"] == "LogSoftmax")
    if inner == 1:
        args = [Buf(x), Buf(out), np.int64(outer), np.int64(L), is_log]
        b.launch(program, "softmax_rows", (outer * WG,), (WG,), args)
    else:
        args = [Buf(x), Buf(out), np.int64(outer), np.int64(L), np.int64(inner), is_log]
        b.launch(program, "softmax", (outer * inner,), None, args)


def _row_norm(b: Builder, step: dict) -> None:
    """Layer-, RMS-, Instance-, GroupNormalization: see row_norm in norm.cl."""
    x, scale, *rest = step["inputs"]
    bias = rest[0] if rest else None
    out, *stats = step["outputs"]
    shape, attrs, op = b.shape(x), step["attributes"], step["type"]
    eps = np.float32(attrs.get("epsilon", 1e-5))
    if op in ("LayerNormalization", "RMSNormalization"):
        axis = int(attrs.get("axis", -1)) % len(shape)
        rows, L = math.prod(shape[:axis]), math.prod(shape[axis:])
        G, CG, D = 1, 0, 1
        S_scale = math.prod(b.shape(scale))
        S_bias = math.prod(b.shape(bias)) if bias is not None else 1
    else:
        N, C, spatial = shape[0], shape[1], math.prod(shape[2:])
        G = int(attrs.get("num_groups", C)) if op == "GroupNormalization" else C
        if G <= 0 or C % G:
            raise ModelFormatError(f"gpu backend: {op} '{step.get('name')}' of {G} groups over {shape}")
        rows, L = N * G, C // G * spatial
        per_channel = math.prod(b.shape(scale)) == C
        CG, D, S_scale = (C // G, spatial, C // G) if per_channel else (1, L, 1)
        S_bias = S_scale
    has_bias = bias is not None
    bias = bias if has_bias else scale  # not read without a bias: any buffer fills the argument
    args = [Buf(x), Buf(scale), Buf(bias), Buf(out), np.int64(rows), np.int64(L), eps]
    args += [np.int32(has_bias), *(np.int64(v) for v in (G, CG, D, S_scale, S_bias))]
    args += [np.int32(op != "RMSNormalization"), *_stats(stats, rows, out)]
    program = b.program(source("norm.cl"), options(b, f"-DWG={WG}"))
    b.launch(program, "row_norm", (rows * WG,), (WG,), args)


def _stats(stats: list, rows: int, out: int) -> list:
    """The has_stats flag and the Mean / InvStdDev buffers of row_norm: a step scratch buffer for
    one that is absent while the other is listed, ``out`` (never written) when neither is."""
    stats = (stats + [None, None])[:2]
    if all(v is None for v in stats):
        return [np.int32(0), Buf(out), Buf(out)]
    return [np.int32(1)] + [
        Buf(v) if v is not None else Scratch(rows * 4, key) for v, key in zip(stats, "mi")
    ]


def _lrn(b: Builder, step: dict) -> None:
    """LRN: the sum of squares over a window of ``size`` channels, floor((size-1)/2) before and
    ceil((size-1)/2) after each channel, as ONNX defines it."""
    (x,), (out,) = step["inputs"], step["outputs"]
    a = step["attributes"]
    shape = b.shape(x)
    size = int(a["size"])
    C, inner, n = shape[1], math.prod(shape[2:]), math.prod(shape)
    args = [Buf(x), Buf(out), np.int64(n), np.int32(C), np.int64(inner)]
    args += [np.int32((size - 1) // 2), np.int32(-(-(size - 1) // 2))]
    args += [
        np.float32(float(a.get("alpha", 1e-4)) / size),
        np.float32(a.get("beta", 0.75)),
        np.float32(a.get("bias", 1.0)),
    ]
    b.launch(b.program(source("norm.cl"), float_options(b)), "lrn", (n,), None, args)


LAUNCH = {
    "BatchNormalization": _batchnorm,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "LayerNormalization": _row_norm,
    "RMSNormalization": _row_norm,
    "InstanceNormalization": _row_norm,
    "GroupNormalization": _row_norm,
    "LRN": _lrn,
}
