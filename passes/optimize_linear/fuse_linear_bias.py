"""optimize_linear::fuse_linear_bias — a constant added to a Gemm's result joins its C.

Rule: ``Add(Gemm(a, b, C, alpha, beta), c)`` (either order; Sub as ``+(-c)``;
``Sub(c, Gemm)`` with ``-alpha``), c a constant that broadcasts to the Gemm's (M, N) output
without changing it, C constant or absent, and the Gemm output read by the Add alone, becomes
``Gemm(a, b, C', alpha', beta=1)`` with ``C' = ±beta·C + c`` computed in float64 and rounded
once. The sum is the same; it is rounded at other points: float rounding only.

Before::

    %g: (4,3,fp32) = Gemm(A=%x, B=%w, C=%b)
    %y: (4,3,fp32) = Add(A=%g, B=%c)              # %c: (1,3,fp32)

After::

    %y: (4,3,fp32) = Gemm(A=%x, B=%w, C=%y_bias)  # %y_bias = %b + %c
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const, is_float
from ..registry import graph_pass
from ._bias import bias_after


@graph_pass("optimize_linear::fuse_linear_bias")
def fuse_linear_bias(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, gemm in rw.ops():
        if gemm.op_type != "Gemm" or gemm.domain or not rw.alive(gemm) or not is_float(gemm.outputs[0]):
            continue
        old_c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        if old_c is not None and const(old_c) is None:
            continue
        bias = bias_after(rw, gemm.outputs[0])
        if bias is None:
            continue
        out = gemm.outputs[0]
        attrs = dict(gemm.attributes)
        beta = float(attrs.get("beta", 1.0))
        total = bias.c.astype(np.float64)
        if old_c is not None:
            total = total + bias.sign * beta * const(old_c).astype(np.float64)
        attrs["alpha"] = bias.sign * float(attrs.get("alpha", 1.0))
        attrs["beta"] = 1.0
        dtype = out.type.dtype.numpy
        # c and C both broadcast to (M, N), so their sum does too
        c = rw.constant(block, total.astype(dtype), stem=f"{bias.op.outputs[0].name}_bias")
        fused = rw.build(block, "Gemm", [*gemm.inputs[:2], c], attrs, before=bias.op, stem="gemm")
        if rw.replace_op(bias.op, fused):
            rw.drop(gemm, bias.op)
            changed = True
    return changed
