"""optimize_linear::fuse_matmul_weight_bias — a 2-D MatMul by a constant weight plus a constant is one Gemm.

Rule: ``Add(MatMul(a, W), c)`` (either Add order; ``Sub(MatMul(a, W), c)`` with ``-c``;
``Sub(c, MatMul(a, W))`` with ``-W``), a and W of rank 2, W constant (either operand of the
MatMul), c a constant that broadcasts to the product's (M, N) shape without changing it and
the product read by the Add alone, becomes ``Gemm(a, W, c)``. Gemm is 2-D only, so a batched
or 1-D MatMul stays. The sum is the same; only where it is rounded may differ (Gemm may add c
before rounding the product), float rounding only. Negating W or c is exact.

Before::

    %p: (4,3,fp32) = MatMul(A=%x, B=%w)           # %x: (4,5,fp32), %w: (5,3,fp32)
    %y: (4,3,fp32) = Add(A=%p, B=%b)              # %b: (3,fp32)

After::

    %y: (4,3,fp32) = Gemm(A=%x, B=%w, C=%b)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter, const, is_float, rank
from ..registry import graph_pass
from ._bias import bias_after


@graph_pass("optimize_linear::fuse_matmul_weight_bias")
def fuse_matmul_weight_bias(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, mm in rw.ops():
        if mm.op_type != "MatMul" or mm.domain or not rw.alive(mm) or not is_float(mm.outputs[0]):
            continue
        a, w = mm.inputs
        if rank(a) != 2 or rank(w) != 2:
            continue
        which = 1 if const(w) is not None else 0 if const(a) is not None else None
        bias = bias_after(rw, mm.outputs[0])
        if which is None or bias is None:
            continue
        operands = [a, w]
        if bias.sign < 0:
            weight = mm.inputs[which]
            operands[which] = rw.constant(block, -const(weight), stem=f"{weight.name}_neg")
        c = rw.constant(block, bias.c, stem=f"{bias.op.outputs[0].name}_bias")
        gemm = rw.build(block, "Gemm", [*operands, c], before=bias.op, stem="gemm")
        if rw.replace_op(bias.op, gemm):
            rw.drop(mm, bias.op)
            changed = True
    return changed
