"""optimize_repeat_ops::merge_consecutive_paddings — two Pads are one.

Rule: ``Pad(Pad(x, p1), p2)`` where the inner one has no other reader becomes
``Pad(x, p1 + p2)`` when all pads are constant and non-negative (a negative pad crops, and
cropping does not commute with padding) and either

1. both are ``constant`` mode with the same constant value, or
2. both have the same other mode (``reflect``, ``edge``, ``wrap``) and pad different axes
   (these modes pad one axis after another, so pads on disjoint axes compose).

Before::

    %a: (1,2,8,8,fp32) = Pad(data=%x, pads=[0, 0, 1, 0, 0, 0, 1, 0], mode='reflect')
    %y: (1,2,8,10,fp32) = Pad(data=%a, pads=[0, 0, 0, 1, 0, 0, 0, 1], mode='reflect')

After::

    %y: (1,2,8,10,fp32) = Pad(data=%x, pads=[0, 0, 1, 1, 0, 0, 1, 1], mode='reflect')
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter, const, rank, scalar
from ..registry import graph_pass


def full_pads(op: Operation) -> np.ndarray | None:
    """The pads of ``op`` as a (2, rank) array [begins; ends] over every axis, when constant."""
    r = rank(op.inputs[0])
    pads = const(op.inputs[1])
    if r is None or pads is None:
        return None
    pads = pads.reshape(-1).astype(np.int64)
    axes_in = op.inputs[3] if len(op.inputs) > 3 else None
    if axes_in is None:
        axes = list(range(r))
    else:
        a = const(axes_in)
        if a is None:
            return None
        axes = [int(i) % r for i in a.reshape(-1)]
    if len(pads) != 2 * len(axes):
        return None
    out = np.zeros((2, r), np.int64)
    for k, ax in enumerate(axes):
        out[0, ax] += pads[k]
        out[1, ax] += pads[k + len(axes)]
    return out


def pad_value(op: Operation) -> float | None:
    v = op.inputs[2] if len(op.inputs) > 2 else None
    return 0.0 if v is None else scalar(v)


@graph_pass("optimize_repeat_ops::merge_consecutive_paddings")
def merge_consecutive_paddings(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type != "Pad" or op.domain or not rw.alive(op):
            continue
        inner = op.inputs[0].producer
        if inner is None or inner.op_type != "Pad" or inner.domain or inner.block is not block:
            continue
        if rw.only_user(inner.outputs[0]) is not op:
            continue
        p1, p2 = full_pads(inner), full_pads(op)
        mode = op.attributes.get("mode", "constant")
        if p1 is None or p2 is None or (p1 < 0).any() or (p2 < 0).any():
            continue
        if inner.attributes.get("mode", "constant") != mode:
            continue
        if mode == "constant":
            value = pad_value(op)
            if value is None or pad_value(inner) != value:
                continue
        elif ((p1 != 0).any(axis=0) & (p2 != 0).any(axis=0)).any():
            continue
        pads = rw.constant(block, (p1 + p2).reshape(-1), stem=f"{op.outputs[0].name}_pads")
        op.set_input(0, inner.inputs[0])
        op.set_input(1, pads)
        if len(op.inputs) > 3:
            op.set_input(3, None)
        rw.drop(inner)
        changed = True
    return changed
