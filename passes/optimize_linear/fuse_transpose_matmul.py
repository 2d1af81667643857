"""optimize_linear::fuse_transpose_matmul — a 2-D Transpose feeding a product is Gemm's transA / transB.

Rule: ``MatMul(Transpose(a), b)`` or ``MatMul(a, Transpose(b))`` with both operands of rank 2
(a rank-2 Transpose is the swap) becomes ``Gemm(a, b, transA=1)`` / ``Gemm(a, b, transB=1)``;
a Transpose feeding a Gemm flips that Gemm's flag. The Transpose stays while something else
reads it. The same products are summed: float rounding at most (a BLAS may order the sum
differently for the other layout).

Before::

    %t: (5,4,fp32) = Transpose(data=%x, perm=[1, 0])     # %x: (4,5,fp32)
    %y: (5,3,fp32) = MatMul(A=%t, B=%w)                 # %w: (4,3,fp32)

After::

    %y: (5,3,fp32) = Gemm(A=%x, B=%w, transA=1)
"""

from __future__ import annotations

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, is_float, rank
from ..registry import graph_pass


def _transposed(v: Value | None) -> Value | None:
    """x when ``v`` is ``Transpose(x)`` of a rank-2 x."""
    op = None if v is None else v.producer
    if op is None or op.op_type != "Transpose" or op.domain or rank(op.inputs[0]) != 2:
        return None
    return op.inputs[0] if op.attributes.get("perm", [1, 0]) in ([1, 0], (1, 0)) else None


def _flags(op: Operation) -> list[int]:
    if op.op_type == "MatMul":
        return [0, 0]
    return [int(op.attributes.get("transA", 0)), int(op.attributes.get("transB", 0))]


@graph_pass("optimize_linear::fuse_transpose_matmul")
def fuse_transpose_matmul(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if (
            op.op_type not in ("MatMul", "Gemm")
            or op.domain
            or not rw.alive(op)
            or not is_float(op.outputs[0])
        ):
            continue
        a, b = op.inputs[:2]
        if rank(a) != 2 or rank(b) != 2:
            continue
        flags = _flags(op)
        inputs = list(op.inputs)
        gone = []
        for i in (0, 1):
            x = _transposed(inputs[i])
            if x is not None:
                gone.append(inputs[i].producer)
                inputs[i] = x
                flags[i] ^= 1
        if not gone:
            continue
        attrs = dict(op.attributes) if op.op_type == "Gemm" else {}
        attrs.update(transA=flags[0], transB=flags[1])
        gemm = rw.build(block, "Gemm", inputs, attrs, before=op, stem="gemm")
        if rw.replace_op(op, gemm):
            rw.drop(*gone, op)
            changed = True
    return changed
