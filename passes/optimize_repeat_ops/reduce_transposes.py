"""optimize_repeat_ops::reduce_transposes — a Transpose pair around elementwise ops becomes one (or none).

Rule: ``Transpose(p)`` → elementwise ops → ``Transpose(q)``, where each op in between reads the
previous value as its only reader and is either unary (Relu, Sigmoid, Cast, Clip with
constant bounds, …) or binary with a constant other operand (Add, Mul, Max, PRelu's slope,
…) and keeps the shape, becomes the same ops on the untransposed x, each constant
transposed by p's inverse (after padding its rank with leading 1s), then one
``Transpose(p∘q)`` — or none when that is the identity. Elementwise ops commute with a
permutation of their operands' axes, so the values are the same, bit for bit.

This is the simple, local form of the catalog's pass: it does not follow a transpose
through fan-out or into several branches (the catalog's example 3), nor through ops whose
axes would change (reductions, Concat, Pad).

Before::

    %t: (1,4,4,3,fp32) = Transpose(data=%x, perm=[0, 2, 3, 1])      # %x: (1,3,4,4,fp32)
    %r: (1,4,4,3,fp32) = Relu(X=%t)
    %a: (1,4,4,3,fp32) = Add(A=%r, B=%c)                            # %c: (3,fp32)
    %y: (1,3,4,4,fp32) = Transpose(data=%a, perm=[0, 3, 1, 2])

After::

    %r: (1,3,4,4,fp32) = Relu(X=%x)
    %y: (1,3,4,4,fp32) = Add(A=%r, B=%c_t)                          # %c_t: (1,3,1,1,fp32)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, const, static_shape
from ..registry import graph_pass
from .merge_consecutive_transposes import perm_of

UNARY = frozenset(
    [
        "Abs",
        "Acos",
        "Asin",
        "Atan",
        "Cast",
        "Ceil",
        "Celu",
        "Clip",
        "Cos",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "Gelu",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "IsInf",
        "IsNaN",
        "LeakyRelu",
        "Log",
        "Mish",
        "Neg",
        "Not",
        "Reciprocal",
        "Relu",
        "Round",
        "Selu",
        "Sigmoid",
        "Sign",
        "Sin",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Tan",
        "Tanh",
        "ThresholdedRelu",
    ]
)
BINARY = frozenset(
    [
        "Add",
        "And",
        "BitShift",
        "Div",
        "Equal",
        "Greater",
        "GreaterOrEqual",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Mod",
        "Mul",
        "Or",
        "Pow",
        "PRelu",
        "Sub",
        "Xor",
    ]
)


def _elementwise_step(op: Operation, v: Value) -> bool:
    """``op`` is elementwise in ``v`` with every other operand a constant, and keeps v's shape."""
    if op.domain or op.block is not v.producer.block:
        return False
    others = [(i, w) for i, w in enumerate(op.inputs) if w is not v]
    if op.op_type in UNARY:
        ok = op.inputs[0] is v and all(
            w is None or (const(w) is not None and const(w).ndim == 0) for _, w in others
        )
    elif op.op_type in BINARY:
        ok = len(op.inputs) == 2 and len(others) == 1 and const(others[0][1]) is not None
        ok = ok and not (op.op_type == "PRelu" and op.inputs[0] is not v)
    else:
        return False
    return ok and len(op.outputs) == 1 and static_shape(op.outputs[0]) == static_shape(v)


@graph_pass("optimize_repeat_ops::reduce_transposes")
def reduce_transposes(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, t1 in rw.ops():
        if t1.op_type != "Transpose" or t1.domain or not rw.alive(t1):
            continue
        p = perm_of(t1)
        if p is None or static_shape(t1.outputs[0]) is None:
            continue
        chain, v = [], t1.outputs[0]
        while (user := rw.only_user(v)) is not None and _elementwise_step(user, v):
            chain.append(user)
            v = user.outputs[0]
        t2 = rw.only_user(v)
        if not chain or t2 is None or t2.op_type != "Transpose" or t2.domain or t2.block is not block:
            continue
        q = perm_of(t2)
        if q is None or len(q) != len(p):
            continue
        inverse = list(np.argsort(p))
        cur, inner = t1.inputs[0], t1.outputs[0]
        for op in chain:
            inputs = []
            for w in op.inputs:
                if w is inner:
                    inputs.append(cur)
                elif w is None or const(w).ndim == 0:
                    inputs.append(w)
                else:
                    c = const(w)
                    full = c.reshape((1,) * (len(p) - c.ndim) + c.shape).transpose(inverse)
                    inputs.append(rw.constant(block, np.ascontiguousarray(full), stem=f"{w.name}_t"))
            new = rw.build(block, op.op_type, inputs, dict(op.attributes), before=t2, stem=op.outputs[0].name)
            cur, inner = new.outputs[0], op.outputs[0]
        composed = [p[i] for i in q]
        if composed == list(range(len(p))):
            done = rw.substitute(t2.outputs[0], cur, block)
        else:
            done = rw.replace_op(t2, rw.build(block, "Transpose", [cur], {"perm": composed}, before=t2))
        if not done:
            continue
        rw.drop(t1, *chain, t2)
        changed = True
    return changed
