"""com.microsoft::EmbedLayerNormalization (BERT-family models optimized by onnxruntime) and its
quantized form QEmbedLayerNormalization as ONNX ops.

The embedding sum ``word_embedding[input_ids] + position_embedding[positions] (+
segment_embedding[segment_ids])`` is three Gathers and Adds; ``positions`` are ``position_ids``
(``[batch, sequence]`` or ``[1, sequence]``) where given, else rows ``0 … sequence-1`` of the
position table (a Slice). The output is LayerNormalization of that sum over its last axis with
gamma, beta and ``epsilon`` (default 1e-12). ``mask_index`` is, per batch row, the number of mask
entries equal to 1 — what onnxruntime's CPU kernel counts (a 2 or a -1 in the mask counts for
nothing) — and zeros where the node has no mask; ``embedding_sum`` is the sum before the
normalization. An id outside its table is an error in onnxruntime and reads as offload's Gather
reads it.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .onnx_contrib import _Node, contrib


def _positions(n: _Node, ids: Value, table: Value, position_ids: Value | None) -> Value:
    if position_ids is not None:
        if n.rank(position_ids) != 2:
            raise n.refuse(
                f"with position_ids '{position_ids.name}' of rank {n.rank(position_ids)} "
                "([batch, sequence] or [1, sequence] expected)"
            )
        return n.one("Gather", [table, position_ids], {"axis": 0})
    length = n.one("Shape", [ids], {"start": 1, "end": 2})
    return n.one("Slice", [table, n.const([0]), length, n.const([0])])


def _mask_index(n: _Node, ids: Value, mask: Value | None) -> Value:
    if mask is None:
        batch = n.one("Shape", [ids], {"start": 0, "end": 1})
        return n.one("ConstantOfShape", [batch], {"value": np.zeros(1, np.int32)})
    ones = n.one("Cast", [n.one("Equal", [mask, n.like(1, mask)])], {"to": int(DataType.INT32)})
    return n.one("ReduceSum", [ones, n.const([1])], {"keepdims": 0})


def _embedded(n: _Node, tables: list, mask: Value | None, position_ids: Value | None) -> list:
    """The node's outputs from its float tables: words, positions, segments (or None), gamma, beta."""
    ids, segment_ids = n.input(0), n.input(1)
    words, positions, segments, gamma, beta = tables
    if n.rank(ids) != 2:
        raise n.refuse(f"with input_ids '{ids.name}' of rank {n.rank(ids)} ([batch, sequence] expected)")
    if n.attr("mask_index_type", 1) not in (0, 1):
        raise n.refuse(f"with mask_index_type={n.attr('mask_index_type')} (0 or 1)")
    if (segment_ids is None) != (segments is None):
        raise n.refuse("with only one of segment_ids and segment_embedding (both or neither)")
    total = n.one(
        "Add", [n.one("Gather", [words, ids], {"axis": 0}), _positions(n, ids, positions, position_ids)]
    )
    if segments is not None:
        total = n.one("Add", [total, n.one("Gather", [segments, segment_ids], {"axis": 0})])
    eps = float(n.attr("epsilon", 1e-12))
    y = n.one("LayerNormalization", [total, gamma, beta], {"axis": -1, "epsilon": eps})
    return [y, _mask_index(n, ids, mask) if n.wants(1) else None, total]


@contrib("EmbedLayerNormalization")
def _embed_layer_norm(n: _Node):
    return _embedded(n, [n.input(i) for i in range(2, 7)], n.input(7), n.input(8))


@contrib("QEmbedLayerNormalization")
def _quantized_embed_layer_norm(n: _Node):
    """The tables, gamma and beta quantized (inputs 2-6, their scales 8-12, zero points 13-17),
    each read through a DequantizeLinear; no position_ids, no embedding sum output."""
    tables = []
    for i in range(2, 7):
        q, scale, zero = n.input(i), n.input(i + 6), n.input(i + 11)
        if q is None:
            tables.append(None)
            continue
        if scale is None:
            raise n.refuse(f"without the scale (input {i + 6}) of '{q.name}'")
        tables.append(n.one("DequantizeLinear", [q, scale, zero]))
    return _embedded(n, tables, n.input(7), None)[:2]
