"""optimize_conv::compose_conv1d — a 1-D convolution written as Unsqueeze → 2-D Conv → Squeeze is a 1-D Conv.

Rule: ``Squeeze(Conv(Unsqueeze(x, [a]), W), [a])`` with ``x`` of rank 3 (N, C, L), ``a`` the
same spatial axis (2 or 3, negative spellings too) in both, ``W`` a constant whose extent
along ``a`` is 1, no padding along ``a``, and the intermediate values read by nothing else,
becomes ``Conv(x, W')`` with ``W'`` = W without that axis and kernel_shape / strides /
dilations / pads keeping only the other spatial axis (Keras' and some PyTorch backends'
Conv1D export). Along ``a`` the 2-D Conv sees one row through a one-row kernel, so both
compute the same sums. (The catalog's channel-last variant, with Transposes around the
Conv, is not matched.)

Before::

    %u: (1,3,1,10,fp32) = Unsqueeze(data=%x, axes=[2])
    %c: (1,8,1,8,fp32) = Conv(X=%u, W=%w)            # %w: (8,3,1,3,fp32)
    %y: (1,8,8,fp32) = Squeeze(data=%c, axes=[2])

After::

    %y: (1,8,8,fp32) = Conv(X=%x, W=%y_w)            # %y_w: (8,3,3,fp32)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter, const, rank
from ..registry import graph_pass


def _one_axis(op: Operation, r: int) -> int | None:
    """The single axis (normalized against rank ``r``) an Unsqueeze / Squeeze names."""
    axes = const(op.inputs[1]) if len(op.inputs) > 1 else None
    if axes is None or axes.size != 1:
        return None
    return int(axes.reshape(-1)[0]) % r


def _conv1d_attributes(conv: Operation, k: int) -> dict | None:
    """The Conv's attributes without spatial axis ``k`` (0 or 1), or None when ``k`` is padded."""
    attrs = dict(conv.attributes)
    pads = attrs.get("pads")
    if pads is not None:
        if pads[k] or pads[k + 2]:
            return None
        attrs["pads"] = [int(pads[1 - k]), int(pads[3 - k])]
    for name in ("kernel_shape", "strides", "dilations"):
        if attrs.get(name) is not None:
            attrs[name] = [int(attrs[name][1 - k])]
    return attrs


@graph_pass("optimize_conv::compose_conv1d")
def compose_conv1d(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, unsq in rw.ops():
        if unsq.op_type != "Unsqueeze" or unsq.domain or not rw.alive(unsq) or rank(unsq.inputs[0]) != 3:
            continue
        a = _one_axis(unsq, 4)
        conv = rw.only_user(unsq.outputs[0])
        if a not in (2, 3) or conv is None or conv.op_type != "Conv" or conv.domain:
            continue
        if conv.inputs[0] is not unsq.outputs[0] or rank(conv.outputs[0]) != 4:
            continue
        sq = rw.only_user(conv.outputs[0])
        if sq is None or sq.op_type != "Squeeze" or sq.domain or _one_axis(sq, 4) != a:
            continue
        w = const(conv.inputs[1])
        if w is None or w.ndim != 4 or w.shape[a] != 1:
            continue
        attrs = _conv1d_attributes(conv, a - 2)
        if attrs is None:
            continue
        stem = sq.outputs[0].name
        inputs = [unsq.inputs[0], rw.constant(block, np.squeeze(w, axis=a), stem=f"{stem}_w")]
        inputs += list(conv.inputs[2:])
        conv1d = rw.build(block, "Conv", inputs, attrs, before=sq, stem=stem)
        if rw.replace_op(sq, conv1d):
            rw.drop(unsq, conv, sq)
            changed = True
    return changed
