"""optimize_quantization::dequantize_quantize_pair_elimination — quantizing what was just dequantized gives it back.

Rule: ``QuantizeLinear(DequantizeLinear(q, s, zp), s, zp)`` with the same constant scale and
zero point (and axis / block size unless per tensor), ``q`` an 8- or 16-bit integer tensor,
the dequantized values float32 or float64 and the Quantize's output of ``q``'s type, is ``q``:
``round((q - zp)·s / s) + zp`` is ``q`` exactly for such sizes (the two roundings stay far
below one half; the scale is checked to be far from the subnormal and overflow ranges). The
Dequantize stays where something else reads it. The reverse pair, Quantize → Dequantize,
is not redundant: it rounds.

Before::

    %f: (2,3,fp32) = DequantizeLinear(x=%q, x_scale=%s, x_zero_point=%z)
    %r: (2,3,ui8) = QuantizeLinear(x=%f, y_scale=%s, y_zero_point=%z)
    %y: (2,3,ui8) = Transpose(data=%r)

After::

    %y: (2,3,ui8) = Transpose(data=%q)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter
from ..registry import graph_pass
from ._exact import is_op, undoes


@graph_pass("optimize_quantization::dequantize_quantize_pair_elimination")
def dequantize_quantize_pair_elimination(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, q in rw.ops():
        if not is_op(q, "QuantizeLinear") or not rw.alive(q):
            continue
        dq = q.inputs[0].producer
        if not is_op(dq, "DequantizeLinear") or not undoes(dq, q):
            continue
        if rw.substitute(q.outputs[0], dq.inputs[0], block):
            rw.drop(dq, q)
            changed = True
    return changed
