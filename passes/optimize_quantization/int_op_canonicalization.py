"""optimize_quantization::int_op_canonicalization — data movement between dequantize and quantize runs on the integers.

Rule: ``QuantizeLinear(M(DequantizeLinear(q, s, zp), …), s, zp)`` with ``M`` an op that only
moves or copies elements (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Expand, Tile, Slice,
Gather, DepthToSpace, SpaceToDepth, Identity), per-tensor scale and zero point, the pair
undoing each other exactly as in ``dequantize_quantize_pair_elimination`` and ``M``'s output
read only by the Quantize, becomes ``M(q, …)``: the same integers in the same places, and no
float round trip.

Before::

    %f: (2,6,fp32) = DequantizeLinear(x=%q, x_scale=%s, x_zero_point=%z)
    %t: (6,2,fp32) = Transpose(data=%f, perm=[1, 0])
    %y: (6,2,i8) = QuantizeLinear(x=%t, y_scale=%s, y_zero_point=%z)

After::

    %y: (6,2,i8) = Transpose(data=%q, perm=[1, 0])
"""

from __future__ import annotations

from offload.ir import Program

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
        if move is None or move.op_type not in MOVES or move.domain or rw.only_user(move.outputs[0]) is not q:
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
