"""optimize_activation::fuse_gelu_tanh_approximation — the tanh form of GELU is ``Gelu(x, "tanh")``.

Rule: ``0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`` becomes
``Gelu(x, approximate="tanh")`` (ONNX opset 20). x³ is ``Pow(x, 3)`` or ``Mul(Mul(x, x), x)``
(either order); the inner sum is ``Add(x, Mul(x³, 0.044715))`` (either order); the scaling
``Mul(·, √(2/π))``; after the ``Tanh`` come ``Add(·, 1)`` and the product with x and 0.5 in any
of the three orders fuse_gelu_exact accepts. Every intermediate is read by the next op alone
(x³'s own products excepted), the constants are those numbers up to float32 rounding, and the
result has x's type. The fused op computes the same formula: float rounding only.

Before::

    %p: (2,8,fp32) = Pow(X=%x, Y=%three)
    %q: (2,8,fp32) = Mul(A=%p, B=%c044715)
    %s: (2,8,fp32) = Add(A=%x, B=%q)
    %u: (2,8,fp32) = Mul(A=%s, B=%sqrt_2_over_pi)
    %t: (2,8,fp32) = Tanh(input=%u)
    %a: (2,8,fp32) = Add(A=%t, B=%one)
    %h: (2,8,fp32) = Mul(A=%x, B=%half)
    %y: (2,8,fp32) = Mul(A=%h, B=%a)

After::

    %y: (2,8,fp32) = Gelu(X=%x, approximate='tanh')
"""

from __future__ import annotations

import math

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, close, is_float, other_input, with_scalar
from ..registry import graph_pass
from ._gelu import gelu_tail, replace_by_gelu


def _cube(rw: Rewriter, v: Value, x: Value) -> list[Operation] | None:
    """The ops computing ``v = x³`` (read only inside the pattern), or None."""
    op = v.producer
    if op is None or op.domain or rw.only_user(v) is None:
        return None
    p = with_scalar(op, "Pow", const_second=True)
    if p is not None:
        return [op] if p[0] is x and p[1] == 3.0 else None
    if op.op_type != "Mul":
        return None
    sq = other_input(op, x)
    sq_op = None if sq is None else sq.producer
    if sq_op is None or sq_op.op_type != "Mul" or sq_op.domain or list(sq_op.inputs) != [x, x]:
        return None
    return [sq_op, op] if rw.only_user(sq) is op else None


@graph_pass("optimize_activation::fuse_gelu_tanh_approximation")
def fuse_gelu_tanh_approximation(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for _block, tanh in rw.ops():
        if tanh.op_type != "Tanh" or tanh.domain or not rw.alive(tanh) or not is_float(tanh.outputs[0]):
            continue
        scaled = tanh.inputs[0].producer
        m = with_scalar(scaled, "Mul")
        if m is None or not close(m[1], math.sqrt(2 / math.pi)) or rw.only_user(m[0]) is not scaled:
            continue
        add = m[0].producer
        if add is None or add.op_type != "Add" or add.domain or rw.only_user(scaled.outputs[0]) is not tanh:
            continue
        chain = None
        for x, q in (add.inputs, reversed(add.inputs)):
            k = with_scalar(q.producer, "Mul")
            if k is None or not close(k[1], 0.044715) or rw.only_user(q) is not add:
                continue
            cube = _cube(rw, k[0], x)
            if cube is not None:
                chain = [*cube, q.producer, add, scaled, tanh]
                break
        if chain is None:
            continue
        one_plus = rw.only_user(tanh.outputs[0])
        a = with_scalar(one_plus, "Add")
        if a is None or a[0] is not tanh.outputs[0] or a[1] != 1.0:
            continue
        tail = gelu_tail(rw, one_plus, x)
        if tail is not None and replace_by_gelu(rw, [*chain, one_plus, *tail], x, "tanh"):
            changed = True
    return changed
