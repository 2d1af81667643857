"""optimize_elementwise_binary::fuse_elementwise_to_batchnorm — a per-channel scale and shift is a BatchNormalization.

Rule: ``Add(Mul(x, s), t)`` (either operand order; ``Sub(Mul(x, s), t)`` with ``-t``), with
``x`` a float tensor of rank ≥ 3 and known channel count (axis 1), ``s`` and ``t`` constants
varying only along the channels ((C,1,1), (1,C,1,1), a scalar …), neither op changing ``x``'s
shape and the Mul's result read only by the Add, becomes
``BatchNormalization(x, scale=s, B=t, mean=0, var=1, epsilon=0)``: ``(x - 0) / √1 · s + t``,
the same two roundings as the Mul and the Add.

Before::

    %m: (1,8,5,5,fp32) = Mul(A=%x, B=%s)          # %s: (8,1,1,fp32)
    %y: (1,8,5,5,fp32) = Add(A=%m, B=%t)          # %t: (1,8,1,1,fp32)

After::

    %y: (1,8,5,5,fp32) = BatchNormalization(X=%x, scale=%y_scale, B=%y_bias,
                                            input_mean=%y_mean, input_var=%y_var, epsilon=0.0)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..optimize_conv._fold import per_channel
from ..pattern import Rewriter, is_float, other_input, rank
from ..registry import graph_pass


@graph_pass("optimize_elementwise_binary::fuse_elementwise_to_batchnorm")
def fuse_elementwise_to_batchnorm(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, mul in rw.ops():
        if mul.op_type != "Mul" or mul.domain or not rw.alive(mul) or len(mul.inputs) != 2:
            continue
        m = mul.outputs[0]
        add = rw.only_user(m)
        if add is None or add.op_type not in ("Add", "Sub") or add.domain:
            continue
        if add.op_type == "Sub" and add.inputs[0] is not m:  # t - x·s: not this rule
            continue
        for x in mul.inputs:
            s = other_input(mul, x)
            if x is None or s is None or x.const_value is not None or not is_float(x) or (rank(x) or 0) < 3:
                continue
            scale = per_channel(s, x, m)
            shift = per_channel(other_input(add, m), x, add.outputs[0])
            if scale is None or shift is None:
                continue
            if add.op_type == "Sub":
                shift = -shift
            stem = add.outputs[0].name
            zeros, ones = np.zeros_like(scale), np.ones_like(scale)
            inputs = [x] + [
                rw.constant(block, a, stem=f"{stem}_{n}")
                for a, n in ((scale, "scale"), (shift, "bias"), (zeros, "mean"), (ones, "var"))
            ]
            bn = rw.build(block, "BatchNormalization", inputs, {"epsilon": 0.0}, before=add, stem=stem)
            if rw.replace_op(add, bn):
                rw.drop(mul, add)
                changed = True
            break
    return changed
