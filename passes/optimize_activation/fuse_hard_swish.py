"""optimize_activation::fuse_hard_swish — ``x · clip(x + 3, 0, 6) / 6`` is ``HardSwish(x)``.

Rule 1: ``Mul(HardSigmoid(x, alpha=1/6, beta=0.5), x)`` (either order; alpha 1/6 as a float32,
the HardSigmoid read by the Mul alone) becomes ``HardSwish(x)``: the kernels compute the same
float32 operations in the same order, so the result is bit for bit the same.

Rule 2: ``Clip(Add(x, 3), 0, 6)`` (Add in either order, Clip's bounds constants 0 and 6), then
two ops in either order — a Mul by x (either operand order) and a Mul by 1/6 or a Div by 6 —
becomes ``HardSwish(x)`` (ONNX opset 14: ``x · max(0, min(1, x/6 + 1/2))``). Every value in
the chain is read by the next op alone, every constant holds one number and no more dims
than x (so no broadcast changes the shape), and the result has x's dtype and rank. This is
how PaddlePaddle and PyTorch exports spell hard-swish (MobileNetV3, PP-LCNet, PP-OCR). The
kernel computes ``x · clip(x·(1/6) + 0.5, 0, 1)``: the same function, within float rounding
(a few ulp of the result), not bit for bit.

Before::

    %a: (1,8,5,5,fp32) = Add(A=%x, B=%three)
    %c: (1,8,5,5,fp32) = Clip(input=%a, min=%zero, max=%six)
    %m: (1,8,5,5,fp32) = Mul(A=%x, B=%c)
    %y: (1,8,5,5,fp32) = Mul(A=%m, B=%sixth)

After::

    %y: (1,8,5,5,fp32) = HardSwish(X=%x)

Rule 1 before (PaddlePaddle's newer exports)::

    %h: (1,8,5,5,fp32) = HardSigmoid(X=%x, alpha=0.16666667, beta=0.5)
    %y: (1,8,5,5,fp32) = Mul(A=%h, B=%x)

Not fused: bounds other than (0, 6) (a ReLU6 gate of another shape), a shift other than 3, a
value of the chain read by another op, a constant with more dims than x.
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, close, const, is_float, other_input, rank, same_dtype, scalar, with_scalar
from ..registry import graph_pass


def _number(v: Value | None, r: int) -> float | None:
    """The one number a constant of one element and at most ``r`` dims holds."""
    a = const(v)
    return None if a is None or a.size != 1 or a.ndim > r else scalar(v)


def _sixth(op: Operation, v: Value, r: int) -> bool:
    """``op`` divides ``v`` by 6 or multiplies it by 1/6."""
    if op.domain or len(op.inputs) != 2:
        return False
    if op.op_type == "Div":
        return op.inputs[0] is v and close(_number(op.inputs[1], r), 6.0)
    return op.op_type == "Mul" and close(_number(other_input(op, v), r), 1 / 6)


def _tail(rw: Rewriter, clip: Operation, x: Value, r: int) -> list[Operation] | None:
    """The two ops after the Clip that multiply by x and by 1/6, in either order."""
    ops, v, need_x, need_sixth = [], clip.outputs[0], True, True
    while need_x or need_sixth:
        user = rw.only_user(v)
        if user is None:
            return None
        if (
            need_x
            and user.op_type == "Mul"
            and not user.domain
            and len(user.inputs) == 2
            and other_input(user, v) is x
        ):
            need_x = False
        elif need_sixth and _sixth(user, v, r):
            need_sixth = False
        else:
            return None
        ops.append(user)
        v = user.outputs[0]
    return ops


def _gate_times_x(rw: Rewriter, gate: Operation) -> Operation | None:
    """The Mul of ``gate`` (a HardSigmoid of slope 1/6 and offset 1/2) by its own input."""
    x, a = gate.inputs[0], gate.attributes
    if np.float32(a.get("alpha", 0.2)) != np.float32(1 / 6) or np.float32(a.get("beta", 0.5)) != np.float32(
        0.5
    ):
        return None
    mul = rw.only_user(gate.outputs[0])
    if mul is None or mul.op_type != "Mul" or mul.domain or len(mul.inputs) != 2:
        return None
    # the two operands both have x's shape: so has the product
    return mul if other_input(mul, gate.outputs[0]) is x and same_dtype(x, mul.outputs[0]) else None


@graph_pass("optimize_activation::fuse_hard_swish")
def fuse_hard_swish(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, gate in rw.ops():
        if gate.op_type != "HardSigmoid" or gate.domain or not rw.alive(gate) or not is_float(gate.inputs[0]):
            continue
        mul = _gate_times_x(rw, gate)
        if mul is None:
            continue
        swish = rw.build(block, "HardSwish", [gate.inputs[0]], {}, before=mul, stem="hard_swish")
        if rw.replace_op(mul, swish):
            rw.drop(gate, mul)
            changed = True
    for block, clip in rw.ops():
        if clip.op_type != "Clip" or clip.domain or len(clip.inputs) != 3 or not rw.alive(clip):
            continue
        add = clip.inputs[0].producer
        m = with_scalar(add, "Add")
        if m is None or rw.only_user(clip.inputs[0]) is not clip:
            continue
        x, shift = m
        r = rank(x)
        if r is None or not is_float(x) or _number(other_input(add, x), r) != 3.0:
            continue
        if _number(clip.inputs[1], r) != 0.0 or _number(clip.inputs[2], r) != 6.0 or shift != 3.0:
            continue
        tail = _tail(rw, clip, x, r)
        if tail is None or not same_dtype(x, tail[-1].outputs[0]) or rank(tail[-1].outputs[0]) != r:
            continue
        last = tail[-1]
        swish = rw.build(block, "HardSwish", [x], {}, before=last, stem="hard_swish")
        if rw.replace_op(last, swish):
            rw.drop(add, clip, *tail)
            changed = True
    return changed
