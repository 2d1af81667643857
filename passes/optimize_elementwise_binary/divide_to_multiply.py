"""optimize_elementwise_binary::divide_to_multiply — division by a constant is multiplication by its reciprocal.

Rule: ``Div(x, c)`` with ``c`` a float constant without zeros becomes ``Mul(x, 1/c)``, the
reciprocal computed in float64 and rounded once to c's dtype (so the result may differ from
the division in the last bit). Integer division stays (it truncates).

Before::

    %y: (2,3,fp32) = Div(A=%x, B=%c)           # %c = 4.0

After::

    %y: (2,3,fp32) = Mul(A=%x, B=%c_inv)       # %c_inv = 0.25
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const, is_float
from ..registry import graph_pass


@graph_pass("optimize_elementwise_binary::divide_to_multiply")
def divide_to_multiply(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Div" or op.domain or not is_float(op.outputs[0]):
            continue
        c = const(op.inputs[1])
        if c is None or c.dtype.kind != "f" or not np.all(c):
            continue
        inv = (1.0 / c.astype(np.float64)).astype(c.dtype)
        mul = rw.build(
            block, "Mul", [op.inputs[0], rw.constant(block, inv, stem=f"{op.inputs[1].name}_inv")], before=op
        )
        if rw.replace_op(op, mul):
            rw.drop(op)
            changed = True
    return changed
