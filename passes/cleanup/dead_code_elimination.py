"""cleanup::dead_code_elimination — remove ops and constants that no result depends on.

Rule: an op goes when none of its outputs is read (by an op, nested ones included) or
returned by a block, and its semantics are known (ops of unknown domains stay); repeated until
nothing changes, inside nested blocks too. Constants nothing reads go as well.

Before::

    block main(%x: (2,4,fp32)) {
        %w: (4,2,fp32) = const
        %m: (2,2,fp32) = MatMul(A=%x, B=%w)
        %y: (2,4,fp32) = Relu(X=%x)
    } -> (%y)

After::

    block main(%x: (2,4,fp32)) {
        %y: (2,4,fp32) = Relu(X=%x)
    } -> (%y)
"""

from __future__ import annotations

from offload.ir import Program, remove_dead_ops

from ..registry import graph_pass


@graph_pass("cleanup::dead_code_elimination")
def dead_code_elimination(program: Program) -> bool:
    removed = 0
    for fn in program.functions.values():
        removed += remove_dead_ops(fn.body)
    return removed > 0
