"""optimize_activation::fuse_prelu — ``relu(x) + a · relu(-x)`` is ``PRelu(x, -a)``.

Rule: ``Add(Relu(x), Mul(Relu(Neg(x)), a))`` — ``Neg(x)`` also spelled ``Mul(x, -1)``, the
Add and the Mul in either operand order — with ``a`` a finite float constant that broadcasts
to x's shape (a per-channel ``(C,1,1)`` or ``(1,C,1,1)``, or one value) and every
intermediate read by the pattern alone, becomes ``PRelu(x, slope=-a)``. For x < 0 the sum is
``0 + (-x)·a = x·(-a)``, for x ≥ 0 it is ``x + 0·a = x``: the same numbers bit for bit, since
negation is exact (a finite, so 0·a is 0).

Before::

    %r: (1,4,3,3,fp32) = Relu(X=%x)
    %n: (1,4,3,3,fp32) = Neg(X=%x)
    %rn: (1,4,3,3,fp32) = Relu(X=%n)
    %m: (1,4,3,3,fp32) = Mul(A=%rn, B=%a)       # %a: (4,1,1,fp32)
    %y: (1,4,3,3,fp32) = Add(A=%r, B=%m)

After::

    %y: (1,4,3,3,fp32) = PRelu(X=%x, slope=%y_slope)     # %y_slope = -%a
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, const, is_float, other_input, same_type, with_scalar
from ..registry import graph_pass


def _relu_of(v: Value | None) -> Operation | None:
    op = None if v is None else v.producer
    return op if op is not None and op.op_type == "Relu" and not op.domain else None


def _negated(op: Operation | None) -> Value | None:
    """x when ``op`` is ``Neg(x)`` or ``Mul(x, -1)``."""
    if op is None or op.domain:
        return None
    if op.op_type == "Neg":
        return op.inputs[0]
    m = with_scalar(op, "Mul")
    return m[0] if m is not None and m[1] == -1.0 else None


@graph_pass("optimize_activation::fuse_prelu")
def fuse_prelu(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, add in rw.ops():
        if add.op_type != "Add" or add.domain or not rw.alive(add) or not is_float(add.outputs[0]):
            continue
        for r, m in (add.inputs, reversed(add.inputs)):
            relu = _relu_of(r)
            mul = None if m is None else m.producer
            if relu is None or mul is None or mul.op_type != "Mul" or mul.domain:
                continue
            x = relu.inputs[0]
            neg_relu = next((_relu_of(v) for v in mul.inputs if _relu_of(v) is not None), None)
            if neg_relu is None or relu is neg_relu:
                continue
            neg = neg_relu.inputs[0].producer
            a = const(other_input(mul, neg_relu.outputs[0]))
            if _negated(neg) is not x or a is None or a.dtype != x.type.dtype.numpy:
                continue
            chain = [relu, neg, neg_relu, mul]
            if any(rw.only_user(op.outputs[0]) is None for op in chain) or not np.all(np.isfinite(a)):
                continue
            if not same_type(x, add.outputs[0]) or a.ndim > x.type.rank:
                continue
            slope = rw.constant(block, -a, stem=f"{add.outputs[0].name}_slope")
            prelu = rw.build(block, "PRelu", [x, slope], before=add, stem="prelu")
            if rw.replace_op(add, prelu):
                rw.drop(relu, neg, neg_relu, mul, add)
                changed = True
            break
    return changed
