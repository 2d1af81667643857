"""optimize_conv::fuse_conv_bias — a constant added to a convolution's output is its bias.

Rule: ``Add(Conv(x, W, B), c)`` (either operand order) or ``Sub(Conv(x, W, B), c)``, with
``c`` a constant varying only along the output channels (scalar, (C,1,1), (1,C,1,1)), the
Add not changing the conv output's shape, and the Conv output read by nothing else, becomes
``Conv(x, W, B ± c)``.

Before::

    %c: (1,8,5,5,fp32) = Conv(X=%x, W=%w)
    %y: (1,8,5,5,fp32) = Add(A=%c, B=%bias)       # %bias: (8,1,1,fp32)

After::

    %y: (1,8,5,5,fp32) = Conv(X=%x, W=%w, B=%y_bias)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter
from ..registry import graph_pass
from ._fold import bias_of, conv_with_weights, per_channel


@graph_pass("optimize_conv::fuse_conv_bias")
def fuse_conv_bias(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, conv in rw.ops():
        if not rw.alive(conv) or not conv_with_weights(conv):
            continue
        out = conv.outputs[0]
        user = rw.only_user(out)
        if user is None or user.op_type not in ("Add", "Sub") or user.domain:
            continue
        if user.op_type == "Sub" and user.inputs[0] is not out:
            continue  # c - conv would negate the weights: not this rule
        c = user.inputs[1] if user.inputs[0] is out else user.inputs[0]
        vec = per_channel(c, out, user.outputs[0])
        if vec is None:
            continue
        bias = bias_of(conv, len(vec), vec.dtype)
        new_bias = bias + vec if user.op_type == "Add" else bias - vec
        inputs = [conv.inputs[0], conv.inputs[1], rw.constant(block, new_bias, stem=f"{out.name}_bias")]
        fused = rw.build(block, "Conv", inputs, dict(conv.attributes), before=user, stem=out.name)
        if rw.replace_op(user, fused):
            rw.drop(conv, user)
            changed = True
    return changed
