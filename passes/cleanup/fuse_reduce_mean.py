"""cleanup::fuse_reduce_mean — ReduceSum followed by a division by the count is ReduceMean.

Rule: ``ReduceSum(x, axes)`` whose only reader is ``Mul`` by the constant ``1/N`` or ``Div``
by the constant ``N``, N being the number of elements reduced (static dims), becomes
``ReduceMean(x, axes)`` with the same ``keepdims``. The sum must be float, its axes a
constant (or absent with noop_with_empty_axes=0: every axis), and the scalar must not
broadcast the result to another shape.

Before::

    %s: (2,1,fp32) = ReduceSum(data=%x, axes=%a, keepdims=1)      # %x: (2,8,fp32), %a = [1]
    %y: (2,1,fp32) = Div(A=%s, B=%eight)

After::

    %y: (2,1,fp32) = ReduceMean(data=%x, axes=%a, keepdims=1)
"""

from __future__ import annotations

import math

from offload.ir import Program

from ..pattern import Rewriter, const, is_float, same_type, scalar, static_shape
from ..registry import graph_pass


def reduced_count(op) -> int | None:
    """How many elements a reduce op folds into each output element."""
    shape = static_shape(op.inputs[0])
    if shape is None:
        return None
    axes_in = op.inputs[1] if len(op.inputs) > 1 else None
    if axes_in is None:
        if op.attributes.get("noop_with_empty_axes", 0):
            return None
        axes = list(range(len(shape)))
    else:
        a = const(axes_in)
        if a is None:
            return None
        axes = [int(i) % len(shape) for i in a.reshape(-1)] if len(shape) else []
        if not axes:
            return None
    return math.prod(shape[i] for i in set(axes))


@graph_pass("cleanup::fuse_reduce_mean")
def fuse_reduce_mean(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "ReduceSum" or op.domain or not rw.alive(op) or not is_float(op.inputs[0]):
            continue
        s = op.outputs[0]
        user = rw.only_user(s)
        if user is None or user.op_type not in ("Mul", "Div") or user.domain:
            continue
        n = reduced_count(op)
        other = user.inputs[1] if user.inputs[0] is s else user.inputs[0]
        k = scalar(other)
        if n is None or k is None or not same_type(s, user.outputs[0]):
            continue
        if user.op_type == "Div" and (user.inputs[1] is not other or k != n):
            continue
        if user.op_type == "Mul" and not math.isclose(k, 1.0 / n, rel_tol=1e-6):
            continue
        mean = rw.build(block, "ReduceMean", list(op.inputs), dict(op.attributes), before=user, stem=s.name)
        if rw.replace_op(user, mean):
            rw.drop(op, user)
            changed = True
    return changed
