"""optimize_quantization::distributive_quantized_binary_op_scale_normalization — one input of a
quantized Add/Sub gets scale 1.

A quantized kernel can fuse one input's scale into its arithmetic; with the other input's scale
1 it needs no multiply for that one either. Rule: ``Quantize(Dequantize(x, s_x, zx) ± Dequantize(y,
s_y, zy), s_z, zz)`` with constant per-tensor scales, the sum read only by the Quantize and each
Dequantize only by the sum, becomes the same with scales ``s_x / s_y``, ``1`` and ``s_z / s_y``:
(x - zx)·s_x ± (y - zy)·s_y = s_y·[(x - zx)·s_x/s_y ± (y - zy)], and the Quantize divides by
s_z = s_y·(s_z/s_y). It fires only when ``s_y`` is a power of two, so that every division by it
is exact in floating point and the quantized result is the same integers; otherwise a result
on a rounding boundary could move by one step, and the rewrite stays undone.

Before::

    %a = DequantizeLinear(%x, 0.02, zx)   %b = DequantizeLinear(%y, 0.25, zy)
    %q = QuantizeLinear(Add(%a, %b), 0.5, zz)

After::

    %a = DequantizeLinear(%x, 0.08, zx)   %b = DequantizeLinear(%y, 1.0, zy)
    %q = QuantizeLinear(Add(%a, %b), 2.0, zz)
"""

from __future__ import annotations

import math

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter, const
from ..registry import graph_pass
from ._exact import is_op


def _scale(op: Operation) -> np.ndarray | None:
    """The constant per-tensor float scale of a (De)QuantizeLinear, without a block size."""
    s = const(op.inputs[1]) if len(op.inputs) > 1 else None
    if s is None or s.size != 1 or s.dtype.kind != "f" or op.attributes.get("block_size", 0):
        return None
    return s


def _power_of_two(s: np.ndarray) -> bool:
    v = float(s.reshape(-1)[0])
    if not math.isfinite(v) or v <= 0:
        return False
    mantissa, _ = math.frexp(v)
    return mantissa == 0.5


@graph_pass("optimize_quantization::distributive_quantized_binary_op_scale_normalization")
def distributive_quantized_binary_op_scale_normalization(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, q in rw.ops():
        if not is_op(q, "QuantizeLinear") or not rw.alive(q):
            continue
        binary = q.inputs[0].producer
        if not (is_op(binary, "Add") or is_op(binary, "Sub")) or rw.only_user(binary.outputs[0]) is not q:
            continue
        dq = [v.producer if v is not None else None for v in binary.inputs]
        if not all(is_op(d, "DequantizeLinear") for d in dq) or dq[0] is dq[1]:
            continue
        if any(rw.only_user(d.outputs[0]) is not binary for d in dq):
            continue
        sx, sy, sz = _scale(dq[0]), _scale(dq[1]), _scale(q)
        if sx is None or sy is None or sz is None or not _power_of_two(sy):
            continue
        if float(sy.reshape(-1)[0]) == 1.0:
            continue  # already normalized
        div = sy.reshape(-1)[0]
        for op, s in ((dq[0], sx), (dq[1], np.ones_like(sy)), (q, sz)):
            value = (s / div).astype(s.dtype) if op is not dq[1] else s
            op.set_input(1, rw.constant(block, value.reshape(s.shape), stem=f"{op.outputs[0].name}_scale"))
        changed = True
    return changed
