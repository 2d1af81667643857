"""com.microsoft's attention operators as ONNX Attention (opset 23) and RotaryEmbedding.

- **Attention**: one MatMul of the input with the packed Q | K | V weights (plus the bias), Split
  into Q, K and V, then ONNX Attention with ``q_num_heads = kv_num_heads = num_heads``. The past
  cache (2 x B x N x P x H) is Gathered into ONNX's past_key / past_value and the present one
  stacked back from present_key / present_value. QAttention (onnx_contrib_quant.py) shares the
  rest after its integer product.
- **MultiHeadAttention**: Q, K, V given (3-D, B x S x hidden) with the optional packed bias added
  to each, then ONNX Attention with past_key / past_value as they are.
- **Masks** as onnxruntime's CPU kernels read them: a key that mask_index (or key_padding_mask)
  hides gets ``mask_filter_value`` added to its scores (not -inf), from a 1-D (B: the valid
  length of each row; 2B: each row's end, then its start), 2-D (B x T) or 3-D (B x S x T) mask;
  attention_bias is added as it is; ``unidirectional`` is ONNX's ``is_causal`` (onnxruntime adds
  the lowest float, ONNX -inf: the same zero weight).
- **RotaryEmbedding**: ONNX's RotaryEmbedding (which onnxruntime's is the model of), with the
  contrib op's input order and its scalar position offset expanded to B x S position ids.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from .onnx_contrib import _Node, contrib


def _two_sided(n: _Node, mask, batch) -> bool:
    """Whether a 1-D mask is onnxruntime's 2B form (each row's end, then each row's start)."""
    length, rows = n.type(mask).shape[0], n.type(batch).shape[0]
    return isinstance(length, int) and isinstance(rows, int) and length == 2 * rows != 0


def _filter_mask(n: _Node, mask, total_from, filter_value: float, batch=None):
    """The additive B x 1 x S|1 x T mask of a key mask: 0 where a key is kept, filter_value where
    it is masked. ``total_from``: a value whose last-but-one axis is T (for a 1-D mask); a 1-D
    mask of 2B (``batch``: a value whose first axis is B) keeps keys start <= j < end."""
    if mask is None:
        return None
    rank = n.rank(mask)
    zero, masked = n.const(0.0, np.float32), n.const(filter_value, np.float32)
    if rank == 1:
        t = n.one("Gather", [n.one("Shape", [total_from]), n.const(-2)], {"axis": 0})
        keys = n.one("Range", [n.const(0), t, n.const(1)])
        bounds = n.one("Unsqueeze", [n.one("Cast", [mask], {"to": int(DataType.INT64)}), n.const([1])])
        if batch is not None and _two_sided(n, mask, batch):
            halves = n.one("Reshape", [bounds, n.const([2, -1, 1])])
            end, start = (n.one("Gather", [halves, n.const(i)], {"axis": 0}) for i in (0, 1))
            keep = n.one("And", [n.one("Less", [keys, end]), n.one("GreaterOrEqual", [keys, start])])
        else:
            keep = n.one("Less", [keys, bounds])  # B x T
        return n.one("Unsqueeze", [n.one("Where", [keep, zero, masked]), n.const([1, 2])])
    if rank not in (2, 3):
        raise n.refuse(f"with a mask of rank {rank}")
    keep = n.one("Greater", [mask, n.const(0, n.dtype(mask).numpy)])
    additive = n.one("Where", [keep, zero, masked])
    return n.one("Unsqueeze", [additive, n.const([1, 2] if rank == 2 else [1])])


def _mask(n: _Node, mask, attention_bias, k, past_key, heads: int):
    """ONNX Attention's float attn_mask: the key mask's additive form plus attention_bias. A 1-D
    mask's T is the keys' count, the past's and the new ones' (k: B x L x hidden)."""
    total = None
    if mask is not None and n.rank(mask) == 1:
        keys = n.one("Transpose", [n.one("Reshape", [k, n.const([0, 0, heads, -1])])], {"perm": [0, 2, 1, 3]})
        total = keys if past_key is None else n.one("Concat", [past_key, keys], {"axis": 2})
    mask = _filter_mask(n, mask, total, float(n.attr("mask_filter_value", -10000.0)), k)
    if attention_bias is None:
        return mask
    return attention_bias if mask is None else n.one("Add", [mask, attention_bias])


def _attention_attrs(n: _Node, heads: int) -> dict:
    attrs = {"q_num_heads": heads, "kv_num_heads": heads, "is_causal": int(bool(n.attr("unidirectional", 0)))}
    scale = float(n.attr("scale", 0.0))
    if scale:
        attrs["scale"] = scale
    return attrs


@contrib("Attention")
def _attention(n: _Node):
    x, w, bias, mask, past, attention_bias, past_length = (n.input(i) for i in range(7))
    if past_length is not None:
        raise n.refuse("with a shared past / present buffer")
    proj = n.one("MatMul", [x, w])
    if bias is not None:
        proj = n.one("Add", [proj, bias])
    return packed_attention(n, proj, w, mask, past, attention_bias)


def packed_attention(n: _Node, proj, w, mask, past, attention_bias) -> list:
    """Attention's (and QAttention's) outputs from the input's product with the packed Q | K | V
    weights ``w`` (its bias added): the split, the past and the mask as onnxruntime reads them."""
    for name in ("do_rotary", "past_present_share_buffer"):
        if n.attr(name, 0):
            raise n.refuse(f"with {name}={n.attr(name)}")
    heads = int(n.attr("num_heads", 0))
    sizes = list(n.attr("qkv_hidden_sizes", []))
    if not sizes:
        width = n.dim(w, 1)
        if width % 3:
            raise n.refuse(f"with packed weights '{w.name}' {width} wide (3 x hidden_size expected)")
        sizes = [width // 3] * 3
    if heads <= 0 or any(size % heads for size in sizes) or sizes[0] != sizes[1]:
        raise n.refuse(
            f"with num_heads={heads} and Q, K, V widths {sizes} (num_heads > 0 dividing each, Q and K alike)"
        )
    q, k, v = n.op("Split", [proj, n.const(sizes)], {"axis": -1}, num_outputs=3)
    past_key = past_value = None
    if past is not None:
        past_key = n.one("Gather", [past, n.const(0)], {"axis": 0})
        past_value = n.one("Gather", [past, n.const(1)], {"axis": 0})
    additive = _mask(n, mask, attention_bias, k, past_key, heads)
    y, present_key, present_value = n.op(
        "Attention", [q, k, v, additive, past_key, past_value], _attention_attrs(n, heads), num_outputs=3
    )
    present = None
    if n.wants(1):
        stacked = [n.one("Unsqueeze", [p, n.const([0])]) for p in (present_key, present_value)]
        present = n.one("Concat", stacked, {"axis": 0})
    return [y, present]


@contrib("MultiHeadAttention")
def _multi_head_attention(n: _Node):
    q, k, v, bias, mask, attention_bias, past_key, past_value = (n.input(i) for i in range(8))
    if any(n.input(i) is not None for i in (8, 9)):
        raise n.refuse("with past_sequence_length or cache_indirection")
    if k is None or v is None or n.rank(q) != 3 or n.rank(k) != 3 or n.rank(v) != 3:
        raise n.refuse("with packed or 4-D query / key / value")
    heads = int(n.attr("num_heads"))
    if n.attr("unidirectional", 0) and n.type(k).shape[1] != n.type(q).shape[1]:
        # onnxruntime masks the keys after query i's position for every row but the last, which
        # sees all of them: ONNX's causal mask where there are as many new keys as queries.
        raise n.refuse(
            f"with unidirectional=1 over {n.type(k).shape[1]} keys for {n.type(q).shape[1]} queries"
        )
    if bias is not None:
        sizes = [n.dim(q, 2), n.dim(k, 2), n.dim(v, 2)]
        bq, bk, bv = n.op("Split", [bias, n.const(sizes)], {"axis": 0}, num_outputs=3)
        q, k, v = (n.one("Add", [t, b]) for t, b in ((q, bq), (k, bk), (v, bv)))
    additive = _mask(n, mask, attention_bias, k, past_key, heads)
    y, present_key, present_value = n.op(
        "Attention", [q, k, v, additive, past_key, past_value], _attention_attrs(n, heads), num_outputs=3
    )
    if n.wants(3):
        raise n.refuse("output qk")
    return [y, present_key, present_value]


@contrib("RotaryEmbedding")
def _rotary_embedding(n: _Node):
    x, position_ids, cos, sin = (n.input(i) for i in range(4))
    if n.attr("is_packed_batching", 0):
        raise n.refuse("with is_packed_batching=1")
    rank, rotary = n.rank(x), int(n.attr("rotary_embedding_dim", 0))
    heads = int(n.attr("num_heads", 0))
    if rank == 3 and not heads:
        if rotary:
            raise n.refuse("with rotary_embedding_dim and no num_heads")
        heads = n.dim(x, 2) // (2 * n.dim(cos, 1))
    if n.rank(position_ids) != 2:  # a position offset: positions offset, offset + 1, … per row
        shape = n.one("Shape", [x])
        seq = n.one("Gather", [shape, n.const(1 if rank == 3 else 2)], {"axis": 0})
        start = n.one("Reshape", [n.one("Cast", [position_ids], {"to": int(DataType.INT64)}), n.const([])])
        stop = n.one("Add", [start, seq])
        row = n.one("Unsqueeze", [n.one("Range", [start, stop, n.const(1)]), n.const([0])])
        batch = n.one("Gather", [shape, n.const([0])], {"axis": 0})
        position_ids = n.one("Expand", [row, n.one("Concat", [batch, n.const([1])], {"axis": 0})])
    attrs = {"interleaved": int(n.attr("interleaved", 0)), "rotary_embedding_dim": rotary}
    if rank == 3:
        attrs["num_heads"] = heads
    return [n.one("RotaryEmbedding", [x, cos, sin, position_ids], attrs)]
