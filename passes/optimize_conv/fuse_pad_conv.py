"""optimize_conv::fuse_pad_conv — a zero Pad of the spatial dims before a Conv is the Conv's padding.

Rule: ``Conv(Pad(x, pads, 0), W)`` with the Pad in ``constant`` mode with value 0 (or none),
pads constant, non-negative and zero on the batch and channel axes, the Conv with
``auto_pad=NOTSET`` and the Pad output read by nothing else, becomes ``Conv(x, W)`` with
the pads added to the Conv's own. (The catalog's pass moves a Pad across a Transpose to
reach the conv; on ONNX the useful part is this meld, which makes the Pad disappear.)

Before::

    %p: (1,3,7,7,fp32) = Pad(data=%x, pads=[0, 0, 1, 1, 0, 0, 1, 1])
    %y: (1,8,5,5,fp32) = Conv(X=%p, W=%w)

After::

    %y: (1,8,5,5,fp32) = Conv(X=%x, W=%w, pads=[1, 1, 1, 1])
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..optimize_repeat_ops.merge_consecutive_paddings import full_pads, pad_value
from ..pattern import Rewriter
from ..registry import graph_pass


@graph_pass("optimize_conv::fuse_pad_conv")
def fuse_pad_conv(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, conv in rw.ops():
        if conv.op_type != "Conv" or conv.domain or not rw.alive(conv):
            continue
        pad = conv.inputs[0].producer
        if pad is None or pad.op_type != "Pad" or pad.domain or pad.block is not block:
            continue
        if rw.only_user(pad.outputs[0]) is not conv or conv.attributes.get("auto_pad", "NOTSET") != "NOTSET":
            continue
        if pad.attributes.get("mode", "constant") != "constant" or pad_value(pad) != 0:
            continue
        p = full_pads(pad)
        if p is None or (p < 0).any() or p[:, :2].any():
            continue
        spatial = p.shape[1] - 2
        own = np.array(conv.attributes.get("pads", [0] * (2 * spatial)), np.int64).reshape(2, spatial)
        conv.attributes["pads"] = [int(v) for v in (own + p[:, 2:]).reshape(-1)]
        conv.set_input(0, pad.inputs[0])
        rw.drop(pad)
        changed = True
    return changed
