"""optimize_quantization::int_op_canonicalization — data movement between dequantize and quantize runs on the integers.

Rule: ``QuantizeLinear(M(DequantizeLinear(q, s, zp), …), s, zp)`` with ``M`` an op that only
moves or copies elements (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Expand, Tile, Slice,
Gather, DepthToSpace, SpaceToDepth, Identity), per-tensor scale and zero point, the pair
undoing each other exactly as in ``dequantize_quantize_pair_elimination`` and ``M``'s output
read only by the Quantize, becomes ``M(q, …)``: the same integers in the same places, and no
float round trip. Concat is such an op too where each of its inputs is dequantized alike
(the state updates of streaming int8 models: the kept frames and the new one joined, then
requantized with the same scale and zero point), and Split where each of its outputs is read
only by such a Quantize.

Before::

    %f: (2,6,fp32) = DequantizeLinear(x=%q, x_scale=%s, x_zero_point=%z)
    %t: (6,2,fp32) = Transpose(data=%f, perm=[1, 0])
    %y: (6,2,i8) = QuantizeLinear(x=%t, y_scale=%s, y_zero_point=%z)

After::

    %y: (6,2,i8) = Transpose(data=%q, perm=[1, 0])
"""

from __future__ import annotations

from offload.ir import Operation, Program

from ..pattern import Rewriter, const
from ..registry import graph_pass
from ._exact import is_op, undoes, zero_point

MOVES = {
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Expand",
    "Tile",
    "Slice",
    "Gather",
    "DepthToSpace",
    "SpaceToDepth",
    "Identity",
}


@graph_pass("optimize_quantization::int_op_canonicalization")
def int_op_canonicalization(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, q in rw.ops():
        if not is_op(q, "QuantizeLinear") or not rw.alive(q):
            continue
        move = q.inputs[0].producer
        if move is not None and not move.domain and move.op_type == "Split":
            changed |= _split_on_integers(rw, block, move)
            continue
        if move is None or move.domain or rw.only_user(move.outputs[0]) is not q:
            continue
        if move.op_type == "Concat":
            changed |= _concat_on_integers(rw, block, q, move)
            continue
        if move.op_type not in MOVES:
            continue
        dq = move.inputs[0].producer
        if not is_op(dq, "DequantizeLinear") or not undoes(dq, q):
            continue
        zp = const(zero_point(dq))
        if const(dq.inputs[1]).size != 1 or (zp is not None and zp.size != 1):
            continue
        inputs = [dq.inputs[0], *move.inputs[1:]]
        moved = rw.build(block, move.op_type, inputs, dict(move.attributes), before=q, stem=q.outputs[0].name)
        if rw.replace_op(q, moved):
            rw.drop(dq, move, q)
            changed = True
    return changed


def _per_tensor(dq: Operation) -> bool:
    zp = const(zero_point(dq))
    return const(dq.inputs[1]).size == 1 and (zp is None or zp.size == 1)


def _concat_on_integers(rw: Rewriter, block, q: Operation, concat: Operation) -> bool:
    """``Quantize(Concat(Dequantize(q1), …))`` with every Dequantize undone by the Quantize
    (per tensor) as ``Concat(q1, …)``."""
    dqs = [v.producer if v is not None else None for v in concat.inputs]
    if not dqs or not all(is_op(dq, "DequantizeLinear") and undoes(dq, q) and _per_tensor(dq) for dq in dqs):
        return False
    joined = rw.build(
        block,
        "Concat",
        [dq.inputs[0] for dq in dqs],
        dict(concat.attributes),
        before=q,
        stem=q.outputs[0].name,
    )
    if not rw.replace_op(q, joined):
        return False
    rw.drop(*dqs, concat, q)
    return True


def _split_on_integers(rw: Rewriter, block, split: Operation) -> bool:
    """``Quantize(Split(Dequantize(q))[k])`` for every output k, each Quantize undoing the
    Dequantize (per tensor), as ``Split(q)[k]``."""
    dq = split.inputs[0].producer if split.inputs and split.inputs[0] is not None else None
    if not is_op(dq, "DequantizeLinear") or not _per_tensor(dq) or not rw.alive(split):
        return False
    qs = [rw.only_user(o) for o in split.outputs]
    if not all(
        is_op(q, "QuantizeLinear") and q.inputs[0] is o and undoes(dq, q) for q, o in zip(qs, split.outputs)
    ):
        return False
    parts = rw.build(
        block,
        "Split",
        [dq.inputs[0], *split.inputs[1:]],
        dict(split.attributes),
        after=split,
        num_outputs=len(split.outputs),
        stem=split.outputs[0].name,
    )
    changed = False
    for q, part in zip(qs, parts.outputs):
        changed |= rw.substitute(q.outputs[0], part, block)
    rw.drop(dq, split, *qs)
    rw.drop(parts)
    return changed
