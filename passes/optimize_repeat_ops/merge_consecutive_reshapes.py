"""optimize_repeat_ops::merge_consecutive_reshapes — a chain of Reshapes is one Reshape.

Rule: ``Reshape(Reshape(x, s1), s2)`` where the inner Reshape has no other reader becomes
``Reshape(x, s2')``: s2' is the outer output's static shape when known, else s2 itself when
it is a constant without 0 entries (a 0 copies a dim of the *inner* output). Squeeze,
Unsqueeze and Flatten count as reshapes too when the outer output shape is static.

Before::

    %a: (2,12,fp32) = Reshape(data=%x, shape=%s1)       # %x: (2,3,4,fp32)
    %y: (24,fp32) = Reshape(data=%a, shape=%s2)

After::

    %y: (24,fp32) = Reshape(data=%x, shape=%s2)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const, static_shape
from ..registry import graph_pass

RESHAPES = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


@graph_pass("optimize_repeat_ops::merge_consecutive_reshapes")
def merge_consecutive_reshapes(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type not in RESHAPES or op.domain or not rw.alive(op):
            continue
        inner = op.inputs[0].producer if op.inputs[0] is not None else None
        if inner is None or inner.op_type not in RESHAPES or inner.domain or inner.block is not block:
            continue
        if rw.only_user(inner.outputs[0]) is not op:
            continue
        out_shape = static_shape(op.outputs[0])
        if out_shape is not None:
            target = np.array(out_shape, np.int64)
            shape = rw.constant(block, target, stem=f"{op.outputs[0].name}_shape")
        elif op.op_type == "Reshape" and not op.attributes.get("allowzero", 0):
            s = const(op.inputs[1])
            if s is None or np.any(s == 0):
                continue
            shape = op.inputs[1]
        else:
            continue
        if op.op_type == "Reshape":
            op.set_input(0, inner.inputs[0])
            op.set_input(1, shape)
        else:
            merged = rw.build(block, "Reshape", [inner.inputs[0], shape], before=op, stem=op.outputs[0].name)
            if not rw.replace_op(op, merged):
                continue
            rw.drop(op)
        rw.drop(inner)
        changed = True
    return changed
