"""Attention (opsets 23-25) and RotaryEmbedding, float32: ``linalg`` GEMM calls and ``attention.cl``.

Attention runs as four steps, each a kernel family of its own:

1. The keys and values as B x Hkv x T x D heads: the inputs themselves when there is no past
   cache (a 3-D input is read through strides, its heads apart), else ``copy_heads`` writes past
   and new into the present cache (the present_key / present_value outputs, or step scratch
   buffers when they are not outputs). Outputs present without a past are copies of K / V.
2. One GEMM per (batch, query head): scores = scale * Q K^T into a B x Hq x Sq x T scratch
   buffer. Query head h reads key / value head h // (Hq / Hkv) (GQA / MQA repeat kv heads).
3. ``attention_softmax``, one work-group per score row: softcap, the bias (is_causal, the
   left / right windows, nonpad_kv_seqlen, attn_mask: bool or float, broadcast to
   B x Hq x Sq x T, a short key axis padded with -inf), the softmax and the fully-masked-row guard,
   in place; it writes the qk_matmul_output stage the mode asks for.
4. One GEMM per (batch, query head): Y = P V, into Y (4-D) or a scratch buffer whose heads
   ``copy_heads`` packs into a 3-D Y.

Steps 2 and 4 are B x Hq GEMM calls each (a GemmCall has no batch axis; strides and offsets
reach every head of a 3-D or 4-D input in place).
The spec scales Q and K each by sqrt(scale) before the product; the GEMM's alpha = scale differs
from it by rounding only. The softmax runs in float32: softmax_precision FLOAT and DOUBLE are
taken (float32 stays within the cases' tolerance of a double softmax), FLOAT16 / BFLOAT16 (which
round the scores to 16 bits first) are refused.

RotaryEmbedding is one ``rotary`` work-item per output element.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, Scratch, float_options, fp16, options, source
from . import linalg

# Q, K, V, the outputs and a float mask are float32; a mask may be bool, nonpad_kv_seqlen and
# position_ids are int64 (CHECKS say which input may be which).
_TYPES = frozenset({DataType.FLOAT, DataType.BOOL, DataType.INT64})
# Work-items of one attention_softmax work-group (a power of two).
WG = 128

CAPS = {
    "Attention": OpCapability(
        _TYPES,
        max_rank=4,
        attributes={"qk_matmul_output_mode": (0, 1, 2, 3), "softmax_precision": (None, 1, 11)},
    ),
    "RotaryEmbedding": OpCapability(frozenset({DataType.FLOAT, DataType.INT64}), max_rank=4),
}
MULTI_OUTPUT = ("Attention",)


def _int(d) -> bool:
    return isinstance(d, int)


def _heads(op) -> tuple:
    """(Hq, Hkv, query head size) of an Attention op; the size is None when its dim is symbolic."""
    q, k = op.inputs[0].type.shape, op.inputs[1].type.shape
    if len(q) == 4:
        return q[1], k[1], q[3]
    hq, hkv = int(op.attributes.get("q_num_heads", 0)), int(op.attributes.get("kv_num_heads", 0))
    return hq, hkv, q[2] // hq if _int(q[2]) and hq else None


def check_attention(op) -> Support | None:
    q, k, v = op.inputs[:3]
    mask, past_key, past_value, nonpad = (list(op.inputs[3:7]) + [None] * 4)[:4]
    if any(x.type.dtype != DataType.FLOAT for x in (q, k, v)):
        return Support(False, "Attention of Q / K / V that are not float32")
    if mask is not None and mask.type.dtype not in (DataType.FLOAT, DataType.BOOL):
        return Support(False, f"Attention attn_mask of type {mask.type.dtype.short}")
    if nonpad is not None and nonpad.type.dtype != DataType.INT64:
        return Support(False, "Attention nonpad_kv_seqlen that is not int64")
    rank = q.type.rank
    if rank not in (3, 4) or k.type.rank != rank or v.type.rank != rank:
        return Support(False, f"Attention of Q / K / V of ranks {q.type.rank}, {k.type.rank}, {v.type.rank}")
    hq, hkv, dq = _heads(op)
    if rank == 3:
        if not hq or not hkv:
            return Support(False, "Attention of 3-D inputs without q_num_heads / kv_num_heads")
        hidden = (q.type.shape[2], k.type.shape[2], v.type.shape[2])
        if not all(_int(d) for d in hidden) or hidden[0] % hq or hidden[1] % hkv or hidden[2] % hkv:
            return Support(False, f"Attention hidden sizes {hidden} over {hq} / {hkv} heads")
        if hidden[1] // hkv != dq:
            return Support(False, "Attention whose query and key head sizes differ")
    elif _int(q.type.shape[3]) and _int(k.type.shape[3]) and q.type.shape[3] != k.type.shape[3]:
        return Support(False, "Attention whose query and key head sizes differ")
    if not _int(hq) or not _int(hkv) or not hkv or hq % hkv:
        return Support(False, f"Attention of {hq} query heads over {hkv} key / value heads")
    if (past_key is None) != (past_value is None):
        return Support(False, "Attention with past_key without past_value (or the reverse)")
    if past_key is not None and nonpad is not None:
        return Support(False, "Attention with both a past cache and nonpad_kv_seqlen")
    if mask is not None and not 1 <= mask.type.rank <= 4:
        return Support(False, f"Attention attn_mask of rank {mask.type.rank}")
    return None


def check_rotary(op) -> Support | None:
    x, cos, sin = op.inputs[:3]
    ids = op.inputs[3] if len(op.inputs) > 3 else None
    if any(v.type.dtype != DataType.FLOAT for v in (x, cos, sin)):
        return Support(False, "RotaryEmbedding of an input that is not float32")
    heads = int(op.attributes.get("num_heads", 0))
    if x.type.rank not in (3, 4) or (x.type.rank == 3 and not heads):
        return Support(False, f"RotaryEmbedding of a rank-{x.type.rank} input (3-D needs num_heads)")
    if x.type.rank == 3 and not (_int(x.type.shape[2]) and x.type.shape[2] % heads == 0):
        return Support(False, f"RotaryEmbedding hidden size {x.type.shape[2]} over {heads} heads")
    head = x.type.shape[3] if x.type.rank == 4 else x.type.shape[2] // heads
    rot = int(op.attributes.get("rotary_embedding_dim", 0)) or head
    if not _int(head) or rot % 2 or rot > head:
        return Support(False, f"RotaryEmbedding of {rot} rotated dims in heads of {head}")
    if cos.type.shape != sin.type.shape or cos.type.shape[-1] != rot // 2:
        return Support(
            False, f"RotaryEmbedding caches {cos.type.shape}, {sin.type.shape} for {rot} rotated dims"
        )
    if cos.type.rank != (2 if ids is not None else 3):
        return Support(False, f"RotaryEmbedding cache of rank {cos.type.rank}")
    return None


CHECKS = {"Attention": check_attention, "RotaryEmbedding": check_rotary}


def _bytes(b: Builder, count: int) -> int:
    """The bytes of a scratch buffer of ``count`` float32 values (stored as stype)."""
    return (2 if fp16(b) else 4) * count


def _copy_heads(
    b: Builder, src, dst, box: tuple, src_strides: tuple, dst_strides: tuple, off: int = 0
) -> None:
    """copy_heads of a (B, H, S, D) box: strides of b, h, s in either layout (d's is 1)."""
    total = math.prod(box)
    if total == 0:
        return
    program = b.program(source("attention.cl"), float_options(b))
    args = [src, dst, np.int64(total), *(np.int64(x) for x in (*box[1:], *src_strides, off, *dst_strides))]
    b.launch(program, "copy_heads", (total,), None, args)


def _heads_view(shape: tuple, heads: int) -> tuple[tuple, tuple]:
    """(box (B, H, S, D), strides of b, h, s) of a Q / K / V input read as heads."""
    if len(shape) == 4:
        B, H, S, D = shape
        return (B, H, S, D), (H * S * D, S * D, D)
    B, S, hidden = shape
    D = hidden // heads
    return (B, heads, S, D), (S * hidden, D, hidden)


def _cache(b: Builder, new: int, past: int | None, present: int | None, heads: int, key: str):
    """Keys (or values) as heads over T positions: (GEMM operand, (B, H, T, D), strides of b, h, t).

    Without a past the input itself is the operand (copied to ``present`` when that is listed);
    with one, past then new are copied into ``present`` or a scratch buffer of the step."""
    box, strides = _heads_view(b.shape(new), heads)
    B, H, S, D = box
    P = b.shape(past)[2] if past is not None else 0
    if past is not None and tuple(b.shape(past)) != (B, H, P, D):
        raise ModelFormatError(
            f"gpu backend: Attention past cache {list(b.shape(past))} for {key} {list(box)}"
        )
    whole = (H * (P + S) * D, (P + S) * D, D)
    if past is None:
        if present is not None:
            _copy_heads(b, Buf(new), Buf(present), box, strides, whole)
        return new, box, strides
    operand = present if present is not None else Scratch(_bytes(b, B * H * (P + S) * D), key)
    dst = Buf(operand) if present is not None else operand
    _copy_heads(b, Buf(past), dst, (B, H, P, D), (H * P * D, P * D, D), whole)
    _copy_heads(b, Buf(new), dst, box, strides, whole, off=P * D)  # after the past positions
    return operand, (B, H, P + S, D), whole


def _mask_strides(shape: tuple, rows: tuple, T: int, name: str) -> tuple[int, int, int, int]:
    """(mask_len, strides of b, h, i) of an attn_mask read as B x Hq x Sq x mask_len: broadcast
    along b, h, i; its key axis is never broadcast (a short one is padded with -inf)."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    if full[3] > T or any(m not in (1, r) for m, r in zip(full[:3], rows)):
        raise ModelFormatError(
            f"gpu backend: Attention '{name}' attn_mask of shape {list(shape)} for {[*rows, T]}"
        )
    natural = (full[1] * full[2] * full[3], full[2] * full[3], full[3])
    return (full[3], *(st if m != 1 else 0 for m, st in zip(full[:3], natural)))


def _attention(b: Builder, step: dict) -> None:
    q, k, v, mask, past_key, past_value, nonpad = (list(step["inputs"]) + [None] * 7)[:7]
    y, present_key, present_value, qk = (list(step["outputs"]) + [None] * 4)[:4]
    attrs, name = step["attributes"], step.get("name") or "Attention"
    qshape = b.shape(q)
    hq, hkv = (
        (qshape[1], b.shape(k)[1]) if len(qshape) == 4 else (attrs["q_num_heads"], attrs["kv_num_heads"])
    )
    (B, Hq, Sq, Dq), (qsb, qsh, qss) = _heads_view(qshape, hq)
    kop, (Bk, Hkv, T, Dk), (ksb, ksh, kss) = _cache(b, k, past_key, present_key, hkv, "keys")
    vop, (Bv, Hv, Tv, Dv), (vsb, vsh, vss) = _cache(b, v, past_value, present_value, hkv, "values")
    # every kernel below indexes by these: inputs that disagree would read out of bounds
    if Bk != B or Bv != B or Hv != Hkv or Tv != T or Dk != Dq or not Hkv or Hq % Hkv:
        raise ModelFormatError(
            f"gpu backend: Attention '{name}' of Q {list(qshape)}, K {list(b.shape(k))}, V {list(b.shape(v))}"
        )
    if nonpad is not None and tuple(b.shape(nonpad)) != (B,):
        raise ModelFormatError(
            f"gpu backend: Attention '{name}' nonpad_kv_seqlen of shape {list(b.shape(nonpad))}"
        )
    group = Hq // Hkv
    scale = attrs.get("scale")
    scale = 1 / math.sqrt(Dq) if scale is None else float(scale)
    alpha = float(np.float32(math.sqrt(scale))) ** 2  # the spec scales Q and K by sqrt(scale)
    scores = Scratch(_bytes(b, B * Hq * Sq * T), "scores")
    run = getattr(b, "gemm", None) or (lambda g: linalg.gemm_kernel(b, g))
    for n, h in np.ndindex(B, Hq):
        q_off, k_off = n * qsb + h * qsh, n * ksb + h // group * ksh
        row = (n * Hq + h) * Sq * T
        run(linalg.GemmCall(Sq, T, Dq, q, q_off, qss, 1, kop, k_off, 1, kss, scores, row, alpha=alpha))

    mask_len, mb, mh, mi = (
        _mask_strides(b.shape(mask), (B, Hq, Sq), T, name) if mask is not None else (0,) * 4
    )
    is_bool = mask is not None and b.dtype(mask) == np.bool_
    program = b.program(source("attention.cl"), options(b, f"-DWG={WG}", "-DMASK_BOOL" if is_bool else ""))
    P = b.shape(past_key)[2] if past_key is not None else 0
    args = [scores, np.int64(B * Hq * Sq), np.int64(T), np.int64(Hq), np.int64(Sq)]
    args += [np.float32(attrs.get("softcap", 0.0)), np.int64(P)]
    args += [Buf(nonpad) if nonpad is not None else scores, np.int32(nonpad is not None)]
    args += [np.int32(attrs.get("is_causal", 0))]
    args += [np.int64(attrs.get("left_window_size", -1)), np.int64(attrs.get("right_window_size", -1))]
    args += [Buf(mask) if mask is not None else scores, np.int32(mask is not None)]
    args += [np.int64(x) for x in (mask_len, mb, mh, mi)]
    args += [Buf(qk) if qk is not None else scores, np.int32(qk is not None)]
    args += [np.int32(attrs.get("qk_matmul_output_mode", 0))]
    if B * Hq * Sq:
        b.launch(program, "attention_softmax", (B * Hq * Sq * WG,), (WG,), args)

    heads_y = len(qshape) == 4
    out = y if heads_y else Scratch(_bytes(b, B * Hq * Sq * Dv), "heads")
    for n, h in np.ndindex(B, Hq):
        v_off, row = n * vsb + h // group * vsh, (n * Hq + h) * Sq
        run(linalg.GemmCall(Sq, Dv, T, scores, row * T, T, 1, vop, v_off, vss, 1, out, row * Dv))
    if not heads_y:  # Y's heads side by side: B x Sq x (Hq * Dv)
        whole = (Hq * Sq * Dv, Sq * Dv, Dv)
        _copy_heads(b, out, Buf(y), (B, Hq, Sq, Dv), whole, (Sq * Hq * Dv, Dv, Hq * Dv))


def _rotary(b: Builder, step: dict) -> None:
    x, cos, sin, ids = (list(step["inputs"]) + [None])[:4]
    (y,) = step["outputs"][:1]
    attrs, shape = step["attributes"], b.shape(x)
    if len(shape) == 4:
        B, H, S, D = shape
    else:
        H = int(attrs["num_heads"])
        B, S, D = shape[0], shape[1], shape[2] // H
    R = int(attrs.get("rotary_embedding_dim", 0)) or D
    cache = b.shape(cos)
    rows = (B, S) if ids is None else (cache[0],)
    if (
        R > D
        or R % 2
        or math.prod(shape) != B * H * S * D
        or tuple(b.shape(sin)) != tuple(cache)
        or tuple(cache) != (*rows, R // 2)
        or (ids is not None and tuple(b.shape(ids)) != (B, S))
    ):
        raise ModelFormatError(
            f"gpu backend: RotaryEmbedding '{step.get('name')}' caches {list(cache)}, {list(b.shape(sin))}"
            f" for {B} x {S} tokens of {R} rotated dims"
        )
    total = math.prod(shape)
    if total == 0:
        return
    positions = cache[0] if ids is not None else B * S
    args = [Buf(x), Buf(cos), Buf(sin), Buf(ids) if ids is not None else Buf(x), Buf(y), np.int64(total)]
    args += [np.int64(v) for v in (H, S, D, R)]
    args += [np.int32(len(shape) == 4), np.int32(attrs.get("interleaved", 0)), np.int32(ids is not None)]
    args += [np.int64(positions)]
    b.launch(b.program(source("attention.cl"), float_options(b)), "rotary", (total,), None, args)


LAUNCH = {"Attention": _attention, "RotaryEmbedding": _rotary}
