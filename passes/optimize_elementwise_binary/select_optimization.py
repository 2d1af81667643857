"""optimize_elementwise_binary::select_optimization — a Where whose choice is known picks its operand.

Rules, for ``y = Where(cond, a, b)``:

1. ``cond`` a constant whose elements are all equal (one number, or a splat): ``y`` is ``a``
   when it is true, else ``b``.
2. ``a`` and ``b`` the same value: ``y`` is that value, whatever ``cond`` holds.

The chosen operand replaces ``y`` when it has ``y``'s type; when Where's broadcast makes ``y``
larger (a static shape), ``Expand`` to that shape stands for it. Both are exact copies.
(The catalog's second rule, ``Where(cond, ±inf, b)`` → ``Where(cond, ±inf, 0) + b``, is not
done: it gives NaN where ``b`` is the opposite infinity or NaN, where Where gives the inf.)

Before::

    %y: (2,3,fp32) = Where(condition=%c, X=%a, Y=%b)        # %c = [True]

After::

    (the readers of %y read %a)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, const, same_type, static_shape
from ..registry import graph_pass


def _chosen(op: Operation) -> Value | None:
    cond, a, b = op.inputs
    if a is b:
        return a
    c = const(cond)
    if c is None or c.size == 0:
        return None
    flat = c.reshape(-1)
    if not np.all(flat == flat[0]):
        return None
    return a if bool(flat[0]) else b


@graph_pass("optimize_elementwise_binary::select_optimization")
def select_optimization(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Where" or op.domain or len(op.inputs) != 3:
            continue
        chosen = _chosen(op)
        out = op.outputs[0]
        if chosen is None or chosen.type is None or out.type is None:
            continue
        if same_type(chosen, out):
            if rw.substitute(out, chosen, block):
                rw.drop(op)
                changed = True
            continue
        shape = static_shape(out)
        if shape is None or chosen.type.dtype != out.type.dtype:
            continue
        target = rw.constant(block, np.array(shape, np.int64), stem=f"{out.name}_shape")
        expand = rw.build(block, "Expand", [chosen, target], before=op, stem=out.name)
        if rw.replace_op(op, expand):
            rw.drop(op)
            changed = True
    return changed
