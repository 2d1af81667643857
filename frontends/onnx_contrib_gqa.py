"""com.microsoft::GroupQueryAttention (onnxruntime's LLM attention with a KV cache) as ONNX ops.

What the op computes, per batch row b (B rows, S new tokens, num_heads N query heads sharing
kv_num_heads Nk key / value heads, head size H, caches B x Nk x length x H, "BNSH"):

- ``T_b = seqlens_k[b] + 1`` keys after this step; ``P_b = max(T_b - S, 0)`` of them were cached
  before (0 in a first prompt, whose rows are right-padded past T_b; T_b - 1 in token generation).
- Query row s sits at position ``P_b + s``; rotary embedding (``do_rotary``, cos / sin caches of
  max_length x rotary_dim / 2) turns Q and the new K at that position.
- present (length ``max(total_sequence_length, past length)``) holds past rows [0, P_b), the S
  new rows at [P_b, P_b + S), zeros elsewhere.
- Query row s sees keys ``t <= last = min(P_b + s, T_b - 1)`` (a padded prompt row sees every
  valid key; with causal=0 every row does) and, with ``local_window_size`` W > 0, only the W
  newest of them (``t > last - W``).
- scores = scale * Q K' (scale 1/sqrt(H) unless given), then ``softcap * tanh(scores / softcap)``
  where softcap > 0, then attention_bias added; softmax over the visible keys, with an extra
  logit (0 for ``smooth_softmax``, ``head_sink[h]`` per head) in the denominator only. Scores,
  softmax and the product with V are float32 for float16 / bfloat16 inputs too, as onnxruntime's
  CPU kernel computes them; rotary embedding and the caches stay in the input type.

The rewrite: Q, K, V (or packed QKV Split) to BNSH; RotaryEmbedding with position ids
``P_b + s``; present as the past Padded to its length, rows from P_b on zeroed (Where), the new
rows ScatterElements'd at ``P_b + s``; Q grouped as B x Nk x (N/Nk * S) x H so that each K / V
head serves its query heads in one MatMul; the mask as a Where to -inf; Softmax (a sink column
Concatenated and Sliced off). Refused: quantized caches, q/k norms, position_ids, query_seqlens,
the window-sized cache, output_qk, local_window_size 0 (or a window with causal=0).
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from .onnx_contrib import _Node, contrib

# The optional inputs (by position) this rewrite does not take.
_REFUSED_INPUTS = {
    9: "position_ids",
    12: "k_scale",
    13: "v_scale",
    14: "q_norm_weight",
    15: "k_norm_weight",
    16: "query_seqlens",
}


def _refuse_unsupported(n: _Node) -> tuple[int, int]:
    """The local window (-1: none) and causal; refuses the attribute values and inputs this
    rewrite does not implement."""
    causal = int(n.attr("causal", 1))
    if causal not in (0, 1):
        raise n.refuse(f"with causal={causal}")
    if int(n.attr("sliding_window_cache", 0)):
        raise n.refuse("with sliding_window_cache=1")
    if int(n.attr("qk_output", 0)) or n.wants(3):
        raise n.refuse("with qk_output / output_qk")
    for name in ("k_quant_type", "v_quant_type"):
        if n.attr(name, "NONE") not in ("NONE", b"NONE"):
            raise n.refuse(f"with {name}={n.attr(name)!r} (a quantized KV cache)")
    window = int(n.attr("local_window_size", -1))
    if window == 0 or window < -1 or (window > 0 and not causal):
        raise n.refuse(f"with local_window_size={window}" + ("" if causal else " and causal=0"))
    for i, name in _REFUSED_INPUTS.items():
        if n.input(i) is not None:
            raise n.refuse(f"with input {name}")
    return window, causal


def _to_heads(n: _Node, x, heads: int, head: int):
    """B x S x (heads * head) -> B x heads x S x head."""
    return n.one("Transpose", [n.one("Reshape", [x, n.const([0, 0, heads, head])])], {"perm": [0, 2, 1, 3]})


def _float(n: _Node, x):
    """``x`` in float32."""
    return x if n.dtype(x) == DataType.FLOAT else n.one("Cast", [x], {"to": int(DataType.FLOAT)})


def _pad_to(n: _Node, x, axis: int, length):
    """``x`` (rank 4) zero-padded at the end of ``axis`` to ``length`` (a 1-element int64 value)."""
    pad_end = n.one("Sub", [length, n.one("Gather", [n.one("Shape", [x]), n.const([axis])], {"axis": 0})])
    pads = n.one("Concat", [n.const([0] * (4 + axis)), pad_end, n.const([0] * (3 - axis))], {"axis": 0})
    return n.one("Pad", [x, pads])


def _present(n: _Node, past, new, rows_at, length, kept):
    """The cache after this step: past rows before each batch row's P_b (B x 1 x L x 1 bool
    ``kept`` says which), zeros after, the new rows scattered at ``rows_at`` (P_b + s)."""
    if past is None:  # P_b is 0 in every row: new rows first, then zeros
        return _pad_to(n, new, 2, length)
    base = n.one("Where", [kept, _pad_to(n, past, 2, length), n.like(0.0, past)])
    return n.one("ScatterElements", [base, rows_at, new], {"axis": 2})


def _visible(n: _Node, slots, positions, keys, causal: int, window: int):
    """Which keys each query row sees (B x 1 x S|1 x L): up to its own position (causal) or every
    valid key (``keys``: T_b), the last ``window`` of them with a local window."""
    last = n.one("Sub", [n.one("Unsqueeze", [keys, n.const([1])]), n.const(1)])
    if causal:
        last = n.one("Min", [positions, last])
    last = n.one("Unsqueeze", [last, n.const([1, 3])])
    columns = n.one("Reshape", [slots, n.const([1, 1, 1, -1])])
    visible = n.one("LessOrEqual", [columns, last])
    if window > 0:
        visible = n.one("And", [visible, n.one("Greater", [columns, n.one("Sub", [last, n.const(window)])])])
    return visible


def _softmax(n: _Node, scores, head_sink, heads: int):
    """Softmax over the last axis; with a sink (``head_sink[h]``, or 0 for ``smooth_softmax``) its
    logit joins the denominator as one more column, whose weight is then dropped."""
    if head_sink is not None:
        sink = n.one("Reshape", [_float(n, head_sink), n.const([1, heads, 1, 1])])
    elif int(n.attr("smooth_softmax", 0)):
        sink = n.const(np.zeros((1, 1, 1, 1)), np.float32)
    else:
        return n.one("Softmax", [scores], {"axis": -1})
    leading = n.one("Slice", [n.one("Shape", [scores]), n.const([0]), n.const([3])])
    column = n.one("Expand", [sink, n.one("Concat", [leading, n.const([1])], {"axis": 0})])
    probs = n.one("Softmax", [n.one("Concat", [scores, column], {"axis": -1})], {"axis": -1})
    return n.one("Slice", [probs, n.const([0]), n.const([-1]), n.const([-1])])


@contrib("GroupQueryAttention")
def _group_query_attention(n: _Node):
    q, k, v, past_key, past_value, seqlens_k, total, cos, sin = (n.input(i) for i in range(9))
    bias, head_sink = n.input(10), n.input(11)
    window, causal = _refuse_unsupported(n)
    heads, kv_heads = int(n.attr("num_heads")), int(n.attr("kv_num_heads"))
    if heads % kv_heads:
        raise n.refuse(f"with num_heads={heads} not a multiple of kv_num_heads={kv_heads}")
    if (past_key is None) != (past_value is None):
        raise n.refuse("with only one of past_key / past_value")
    if bool(n.attr("smooth_softmax", 0)) and head_sink is not None:
        raise n.refuse("with both smooth_softmax=1 and head_sink")
    width = n.dim(q, 2)
    if k is None:  # packed Q | K | V
        head = width // (heads + 2 * kv_heads)
        q, k, v = n.op(
            "Split", [q, n.const([heads * head, kv_heads * head, kv_heads * head])], {"axis": -1}, 3
        )
    else:
        head = width // heads
    if head * (heads if n.input(1) is not None else heads + 2 * kv_heads) != width:
        raise n.refuse(f"with a query width {width} that is not a whole number of heads")
    qh, kh, vh = (
        _to_heads(n, q, heads, head),
        _to_heads(n, k, kv_heads, head),
        _to_heads(n, v, kv_heads, head),
    )

    # T_b, P_b and the position of every query row (B x S)
    i64 = {"to": int(DataType.INT64)}
    keys = n.one("Add", [n.one("Cast", [seqlens_k], i64), n.const(1)])  # T_b
    seq = n.one("Gather", [n.one("Shape", [q]), n.const(1)], {"axis": 0})
    start = n.one("Max", [n.one("Sub", [keys, seq]), n.const(0)])  # P_b
    steps = n.one("Unsqueeze", [n.one("Range", [n.const(0), seq, n.const(1)]), n.const([0])])  # 1 x S
    positions = n.one("Add", [n.one("Unsqueeze", [start, n.const([1])]), steps])  # B x S

    if int(n.attr("do_rotary", 0)):
        if cos is None or sin is None:
            raise n.refuse("with do_rotary=1 and no cos_cache / sin_cache")
        rotary = 2 * n.dim(cos, 1)
        attrs = {
            "interleaved": int(n.attr("rotary_interleaved", 0)),
            "rotary_embedding_dim": 0 if rotary == head else rotary,
        }
        qh = n.one("RotaryEmbedding", [qh, cos, sin, positions], attrs)
        kh = n.one("RotaryEmbedding", [kh, cos, sin, positions], attrs)

    # present: max(total_sequence_length, past length) rows
    length = n.one("Reshape", [n.one("Cast", [total], i64), n.const([1])])
    if past_key is not None:
        past_rows = n.one("Gather", [n.one("Shape", [past_key]), n.const([2])], {"axis": 0})
        length = n.one("Max", [length, past_rows])
    slots = n.one("Range", [n.const(0), n.one("Reshape", [length, n.const([])]), n.const(1)])  # L
    at = n.one("Unsqueeze", [start, n.const([1, 2, 3])])  # B x 1 x 1 x 1
    kept = n.one("Less", [n.one("Reshape", [slots, n.const([1, 1, -1, 1])]), at])  # B x 1 x L x 1
    rows_at = n.one("Unsqueeze", [positions, n.const([1, 3])])  # B x 1 x S x 1
    rows_at = n.one("Expand", [rows_at, n.one("Shape", [kh])])
    present_key = _present(n, past_key, kh, rows_at, length, kept)
    present_value = _present(n, past_value, vh, rows_at, length, kept)

    # in float32, as onnxruntime computes float16 / bfloat16 attention: scores B x N x S x L of
    # each query head against the keys of its group
    group = _float(n, n.one("Reshape", [qh, n.const([0, kv_heads, -1, head])]))
    keys_t = n.one("Transpose", [_float(n, present_key)], {"perm": [0, 1, 3, 2]})
    scale = float(n.attr("scale", 0.0)) or 1.0 / float(np.sqrt(head))
    scores = n.one("Mul", [n.one("MatMul", [group, keys_t]), n.const(scale, np.float32)])
    scores = n.one("Reshape", [scores, n.const([0, heads, -1, 0])])
    softcap = float(n.attr("softcap", 0.0))
    if softcap > 0.0:
        cap = n.const(softcap, np.float32)
        scores = n.one("Mul", [n.one("Tanh", [n.one("Div", [scores, cap])]), cap])
    if bias is not None:  # B|1 x N|1 x S x total_sequence_length, zero-padded to L columns
        scores = n.one("Add", [scores, _float(n, _pad_to(n, bias, 3, length))])

    visible = _visible(n, slots, positions, keys, causal, window)
    scores = n.one("Where", [visible, scores, n.const(-np.inf, np.float32)])
    probs = _softmax(n, scores, head_sink, heads)
    grouped = n.one("Reshape", [probs, n.const([0, kv_heads, -1, 0])])
    y = n.one("MatMul", [grouped, _float(n, present_value)])  # B x Nk x (N/Nk * S) x H
    y = n.one("Transpose", [n.one("Reshape", [y, n.const([0, heads, -1, head])])], {"perm": [0, 2, 1, 3]})
    y = n.one("Reshape", [y, n.const([0, 0, heads * head])])
    if n.dtype(q) != DataType.FLOAT:
        y = n.one("Cast", [y], {"to": int(n.dtype(q))})
    return [y, present_key, present_value]
