"""optimize_quantization::nullify_redundant_quantization_zero_point — zero points that can be zero are dropped.

Rules (8-bit integer zero points, per tensor unless said):

1. A zero point of all zeros is dropped: from DequantizeLinear as is; from QuantizeLinear with
   ``output_dtype`` set to its type (the absent zero point would mean uint8).
2. ``DequantizeLinear(c, s, ±128)`` with ``c`` a constant: ``c ∓ 128`` in the other 8-bit type
   has no zero point (int8 ``c`` with -128 becomes uint8 ``c + 128``; uint8 with 128 becomes
   int8 ``c - 128``); ``(c - zp)·s`` is unchanged.
3. ``DequantizeLinear(QuantizeLinear(x, s, ±128), s', ±128)``, the quantized values read by
   nothing else: both drop the zero point and the Quantize gives the other 8-bit type. uint8
   ``clip(round(x/s) + 128, 0, 255)`` is int8 ``clip(round(x/s), -128, 127)`` plus 128, so the
   dequantized values are the same.

Before::

    %y: (4,fp32) = DequantizeLinear(x=%c, x_scale=%s, x_zero_point=%z)      # %z: i8 -128

After::

    %y: (4,fp32) = DequantizeLinear(x=%c_u8, x_scale=%s)                    # %c_u8 = %c + 128
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Operation, Program, TensorType

from ..pattern import Rewriter, const
from ..registry import graph_pass
from ._exact import is_op, zero_point

FLIP = {np.dtype(np.int8): (np.dtype(np.uint8), -128), np.dtype(np.uint8): (np.dtype(np.int8), 128)}


def _zp(op: Operation) -> np.ndarray | None:
    z = const(zero_point(op))
    return z if z is not None and z.dtype in FLIP else None


def _shift(op: Operation) -> int | None:
    """The per-tensor zero point ±128 of ``op`` that rules 2 and 3 remove, else None."""
    z = _zp(op)
    if z is None or z.size == 0 or op.attributes.get("block_size", 0):
        return None
    flat = z.reshape(-1)
    return int(flat[0]) if np.all(flat == FLIP[z.dtype][1]) else None


@graph_pass("optimize_quantization::nullify_redundant_quantization_zero_point")
def nullify_redundant_quantization_zero_point(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if not (is_op(op, "DequantizeLinear") or is_op(op, "QuantizeLinear")) or not rw.alive(op):
            continue
        z = _zp(op)
        if z is None:
            continue
        if not np.any(z):  # rule 1
            if op.op_type == "QuantizeLinear" and op.attributes.get("output_dtype", 0) == 0:
                op.attributes["output_dtype"] = int(DataType.from_numpy(z.dtype))
            op.set_input(2, None)
            changed = True
            continue
        if op.op_type != "DequantizeLinear" or _shift(op) is None:
            continue
        other, _ = FLIP[z.dtype]
        c = const(op.inputs[0])
        if c is not None and c.dtype == z.dtype:  # rule 2
            moved = (c.astype(np.int16) - _shift(op)).astype(other)
            op.set_input(0, rw.constant(block, moved, stem=f"{op.inputs[0].name}_{other}"))
            op.set_input(2, None)
            changed = True
            continue
        q = op.inputs[0].producer
        if not is_op(q, "QuantizeLinear") or rw.only_user(q.outputs[0]) is not op or _shift(q) != _shift(op):
            continue
        qz = _zp(q)
        if qz is None or qz.dtype != z.dtype:
            continue
        q.attributes["output_dtype"] = int(DataType.from_numpy(other))  # rule 3
        q.set_input(2, None)
        op.set_input(2, None)
        q.outputs[0].type = TensorType(DataType.from_numpy(other), q.outputs[0].type.shape)
        changed = True
    return changed
