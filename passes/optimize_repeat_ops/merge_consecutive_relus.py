"""optimize_repeat_ops::merge_consecutive_relus — Relu of a Relu is the inner Relu.

Rule: ``Relu(Relu(x))`` is ``Relu(x)``: the outer output is replaced by the inner one (which
may have other readers). The outer one stays only when both are function outputs.

Before::

    %a: (2,3,fp32) = Relu(X=%x)
    %y: (2,3,fp32) = Relu(X=%a)

After::

    %y: (2,3,fp32) = Relu(X=%x)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter
from ..registry import graph_pass


@graph_pass("optimize_repeat_ops::merge_consecutive_relus")
def merge_consecutive_relus(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Relu" or op.domain or not rw.alive(op):
            continue
        inner = op.inputs[0].producer
        if inner is None or inner.op_type != "Relu" or inner.domain:
            continue
        if rw.substitute(op.outputs[0], inner.outputs[0], block):
            rw.drop(op)
            changed = True
    return changed
