"""optimize_activation::fuse_gelu_exact — ``0.5 · x · (1 + erf(x / √2))`` is ``Gelu(x)``.

Rule: ``Erf(Div(x, √2))`` (or ``Erf(Mul(x, 1/√2))``), then ``Add(·, 1)``, then the product
with x and 0.5 in any of the three orders the catalog lists (``((1+e)·0.5)·x``,
``((1+e)·x)·0.5``, ``(1+e)·(x·0.5)``) becomes ``Gelu(x, approximate="none")`` (ONNX opset 20).
Every intermediate must be read by the next op alone, the constants must be those numbers up
to float32 rounding, and the result must have x's type (no broadcast against a constant).
The fused op computes the same formula, so the result differs by float rounding only.

Before::

    %d: (2,8,fp32) = Div(A=%x, B=%sqrt2)         # %sqrt2 = 1.4142135
    %e: (2,8,fp32) = Erf(input=%d)
    %a: (2,8,fp32) = Add(A=%e, B=%one)
    %m: (2,8,fp32) = Mul(A=%x, B=%a)
    %y: (2,8,fp32) = Mul(A=%m, B=%half)

After::

    %y: (2,8,fp32) = Gelu(X=%x, approximate='none')
"""

from __future__ import annotations

import math

from offload.ir import Program

from ..pattern import Rewriter, close, is_float, with_scalar
from ..registry import graph_pass
from ._gelu import gelu_tail, replace_by_gelu


@graph_pass("optimize_activation::fuse_gelu_exact")
def fuse_gelu_exact(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for _block, erf in rw.ops():
        if erf.op_type != "Erf" or erf.domain or not rw.alive(erf) or not is_float(erf.outputs[0]):
            continue
        scaled = erf.inputs[0].producer
        div = with_scalar(scaled, "Div", const_second=True)
        mul = with_scalar(scaled, "Mul")
        if div is not None and close(div[1], math.sqrt(2)):
            x = div[0]
        elif mul is not None and close(mul[1], math.sqrt(0.5)):
            x = mul[0]
        else:
            continue
        if rw.only_user(scaled.outputs[0]) is not erf:
            continue
        one_plus = rw.only_user(erf.outputs[0])
        add = with_scalar(one_plus, "Add")
        if add is None or add[0] is not erf.outputs[0] or add[1] != 1.0:
            continue
        tail = gelu_tail(rw, one_plus, x)
        if tail is not None and replace_by_gelu(rw, [scaled, erf, one_plus, *tail], x, "none"):
            changed = True
    return changed
