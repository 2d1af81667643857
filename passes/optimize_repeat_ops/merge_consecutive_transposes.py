"""optimize_repeat_ops::merge_consecutive_transposes — two Transposes are one (or none).

Rule: ``Transpose(Transpose(x, p1), p2)`` where the inner one has no other reader becomes
``Transpose(x, q)`` with ``q[i] = p1[p2[i]]``; when q is the identity the outer output is
replaced by x (unless that would rename a graph input or a constant).

Before::

    %a: (4,3,2,fp32) = Transpose(data=%x, perm=[2, 1, 0])      # %x: (2,3,4,fp32)
    %y: (3,4,2,fp32) = Transpose(data=%a, perm=[1, 0, 2])

After::

    %y: (3,4,2,fp32) = Transpose(data=%x, perm=[1, 2, 0])
"""

from __future__ import annotations

from offload.ir import Operation, Program

from ..pattern import Rewriter, rank
from ..registry import graph_pass


def perm_of(op: Operation) -> list[int] | None:
    perm = op.attributes.get("perm")
    if perm is not None:
        return [int(p) for p in perm]
    r = rank(op.inputs[0])
    return None if r is None else list(reversed(range(r)))


@graph_pass("optimize_repeat_ops::merge_consecutive_transposes")
def merge_consecutive_transposes(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Transpose" or op.domain or not rw.alive(op):
            continue
        inner = op.inputs[0].producer
        if inner is None or inner.op_type != "Transpose" or inner.domain or inner.block is not block:
            continue
        if rw.only_user(inner.outputs[0]) is not op:
            continue
        p1, p2 = perm_of(inner), perm_of(op)
        if p1 is None or p2 is None or len(p1) != len(p2):
            continue
        q = [p1[i] for i in p2]
        x = inner.inputs[0]
        if q == list(range(len(q))):
            if not rw.substitute(op.outputs[0], x, block):
                continue
            rw.drop(inner, op)
        else:
            op.set_input(0, x)
            op.attributes["perm"] = q
            rw.drop(inner)
        changed = True
    return changed
