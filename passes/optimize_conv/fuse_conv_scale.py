"""optimize_conv::fuse_conv_scale — a constant multiplying a convolution's output scales its weights.

Rule: ``Mul(Conv(x, W, B), s)`` (either order) or ``Div(Conv(x, W, B), s)``, with ``s`` a
constant varying only along the output channels and the product keeping the conv output's
shape, the Conv output read by nothing else, becomes ``Conv(x, W·s, B·s)`` (s per output
channel; 1/s for Div, only when s has no zero).

Before::

    %c: (1,8,5,5,fp32) = Conv(X=%x, W=%w, B=%b)
    %y: (1,8,5,5,fp32) = Mul(A=%c, B=%s)          # %s: (1,8,1,1,fp32)

After::

    %y: (1,8,5,5,fp32) = Conv(X=%x, W=%y_w, B=%y_b)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const
from ..registry import graph_pass
from ._fold import bias_of, conv_with_weights, per_channel


@graph_pass("optimize_conv::fuse_conv_scale")
def fuse_conv_scale(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, conv in rw.ops():
        if not rw.alive(conv) or not conv_with_weights(conv):
            continue
        out = conv.outputs[0]
        user = rw.only_user(out)
        if user is None or user.op_type not in ("Mul", "Div") or user.domain:
            continue
        if user.op_type == "Div" and user.inputs[0] is not out:
            continue
        s = user.inputs[1] if user.inputs[0] is out else user.inputs[0]
        vec = per_channel(s, out, user.outputs[0])
        if vec is None or (user.op_type == "Div" and not np.all(vec)):
            continue
        if user.op_type == "Div":
            vec = (1 / vec).astype(vec.dtype)
        w = const(conv.inputs[1])
        new_w = (w * vec.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        had_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
        inputs = [conv.inputs[0], rw.constant(block, new_w, stem=f"{out.name}_w")]
        if had_bias:
            new_b = (bias_of(conv, len(vec), vec.dtype) * vec).astype(vec.dtype)
            inputs.append(rw.constant(block, new_b, stem=f"{out.name}_b"))
        fused = rw.build(block, "Conv", inputs, dict(conv.attributes), before=user, stem=out.name)
        if rw.replace_op(user, fused):
            rw.drop(conv, user)
            changed = True
    return changed
