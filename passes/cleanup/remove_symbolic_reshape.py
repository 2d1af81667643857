"""cleanup::remove_symbolic_reshape — give a Reshape whose target shape is computed a constant one.

Rule: a Reshape (allowzero=0) whose ``shape`` input is not a constant, but whose output type
is known with at most one symbolic or unknown dim and no zero dims, reads a constant shape
instead: the known dims as they are and -1 for the one unknown (Reshape computes it from the
element count, which must agree for the original to be valid). The ops that computed the
shape are left to dead-code elimination.

Before::

    %s: (2,i64) = Concat(in0=%batch, in1=%four, axis=0)     # from Shape → Gather
    %y: (N,4,fp32) = Reshape(data=%x, shape=%s)             # %x: (N,2,2,fp32)

After::

    %s.1: (2,i64) = const                                   # [-1, 4]
    %y: (N,4,fp32) = Reshape(data=%x, shape=%s.1)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program, TensorType

from ..pattern import Rewriter
from ..registry import graph_pass


@graph_pass("cleanup::remove_symbolic_reshape")
def remove_symbolic_reshape(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Reshape" or op.domain or op.attributes.get("allowzero", 0):
            continue
        shape_in = op.inputs[1]
        t = op.outputs[0].type
        if shape_in is None or shape_in.const_value is not None or not isinstance(t, TensorType):
            continue
        if t.shape is None:
            continue
        unknown = [i for i, d in enumerate(t.shape) if not isinstance(d, int)]
        if len(unknown) > 1 or any(d == 0 for d in t.shape):
            continue
        target = np.array([d if isinstance(d, int) else -1 for d in t.shape], np.int64)
        op.set_input(1, rw.constant(block, target, stem=f"{op.outputs[0].name}_shape"))
        changed = True
    if changed:
        from offload.ir.rewrite import remove_dead_ops

        for fn in program.functions.values():
            remove_dead_ops(fn.body, constants=False)
    return changed
