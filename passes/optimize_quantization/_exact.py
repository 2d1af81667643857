"""What the quantization passes share: when QuantizeLinear undoes DequantizeLinear exactly."""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Value

from ..pattern import const

# Integer types whose every value survives (q - zp)·s / s in float32: |q - zp| < 2^17.
EXACT_TYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)}
WIDE_FLOATS = {np.dtype(np.float32), np.dtype(np.float64)}


def is_op(op: Operation | None, op_type: str) -> bool:
    return op is not None and op.op_type == op_type and not op.domain


def zero_point(op: Operation) -> Value | None:
    return op.inputs[2] if len(op.inputs) > 2 else None


def safe_scale(v: Value | None) -> np.ndarray | None:
    """A constant float scale with which (q - zp)·s / s gives back q - zp exactly: finite, and
    far from the subnormal and overflow ranges."""
    s = const(v)
    if s is None or s.dtype not in WIDE_FLOATS or s.size == 0:
        return None
    a = np.abs(s.astype(np.float64))
    return s if np.all((a >= 2.0**-100) & (a <= 2.0**100)) else None


def same_constant(a: Value | None, b: Value | None) -> bool:
    """Both absent, the same value, or constants of one dtype, shape and content."""
    if a is b:
        return True
    ca, cb = const(a), const(b)
    return (
        ca is not None
        and cb is not None
        and ca.dtype == cb.dtype
        and ca.shape == cb.shape
        and np.array_equal(ca, cb)
    )


def undoes(dq: Operation, q: Operation) -> bool:
    """``q`` (a QuantizeLinear) gives back exactly the integers ``dq`` (a DequantizeLinear) read."""
    x = dq.inputs[0]
    if x is None or x.type is None or x.type.dtype.numpy not in EXACT_TYPES:
        return False
    y = dq.outputs[0]
    if y.type is None or y.type.dtype.numpy not in WIDE_FLOATS or q.attributes.get("precision", 0):
        return False
    if q.outputs[0].type is None or q.outputs[0].type.dtype != x.type.dtype:
        return False
    if safe_scale(dq.inputs[1]) is None or not same_constant(dq.inputs[1], q.inputs[1]):
        return False
    if not same_constant(zero_point(dq), zero_point(q)):
        return False
    per_tensor = const(dq.inputs[1]).size == 1 and dq.attributes.get("block_size", 0) == 0
    same_layout = all(
        dq.attributes.get(k, d) == q.attributes.get(k, d) for k, d in (("axis", 1), ("block_size", 0))
    )
    return per_tensor or same_layout
