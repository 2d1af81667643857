"""What the two GELU fusions share: the ``0.5 · x · (1 + f(x))`` tail, in its three spellings."""

from __future__ import annotations

from offload.ir import Operation, Value

from ..pattern import Rewriter, close, keeps_shape, other_input, with_scalar


def _mul_by(rw: Rewriter, v: Value) -> Operation | None:
    user = rw.only_user(v)
    return user if user is not None and user.op_type == "Mul" and not user.domain else None


def gelu_tail(rw: Rewriter, one_plus: Operation, x: Value) -> list[Operation] | None:
    """The ops after ``one_plus`` (the ``Add(f(x), 1)``) that finish ``0.5 · x · (1 + f(x))``,
    the last one producing the GELU; None when the tail is not there or a value in it has
    another reader. The spellings::

        Mul(Mul(1 + f, 0.5), x)      Mul(Mul(1 + f, x), 0.5)      Mul(1 + f, Mul(x, 0.5))
    """
    first = _mul_by(rw, one_plus.outputs[0])
    if first is None:
        return None
    other = other_input(first, one_plus.outputs[0])
    tail = None
    if other is x or _is_half(first):
        second = _mul_by(rw, first.outputs[0])
        if second is not None and (
            _is_half(second) if other is x else other_input(second, first.outputs[0]) is x
        ):
            tail = [first, second]
    elif (
        other is not None
        and _is_half(other.producer)
        and other.producer.inputs.count(x) == 1
        and rw.only_user(other) is first
    ):
        tail = [other.producer, first]
    return tail


def _is_half(op: Operation | None) -> bool:
    """``op`` multiplies by the constant 0.5."""
    m = with_scalar(op, "Mul")
    return m is not None and close(m[1], 0.5)


def replace_by_gelu(rw: Rewriter, chain: list[Operation], x: Value, approximate: str) -> bool:
    """Put ``Gelu(x)`` in place of the chain's last op; the chain goes."""
    last = chain[-1]
    if not keeps_shape(x, last.outputs[0], chain):
        return False  # a broadcast against a constant would change the shape
    gelu = rw.build(last.block, "Gelu", [x], {"approximate": approximate}, before=last, stem="gelu")
    if not rw.replace_op(last, gelu):
        return False
    rw.drop(*chain)
    return True
