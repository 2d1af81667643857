"""cleanup::noop_elimination — remove ops whose output equals their (first) input.

Rules, each only when the output has the input's dtype and shape (no broadcast change):

1. Identity; Dropout in inference (no training_mode, or a constant false one; mask unread).
2. Cast to the input's own dtype.
3. Reshape, Flatten, Squeeze, Unsqueeze, Expand, Tile: output shape equals the input shape.
4. Transpose with the identity permutation.
5. Add / Sub of a constant zero, Mul / Div by a constant one (x + 0 and x - 0 keep x up to
   the sign of a zero result; x * 1 and x / 1 are x).
6. Pad with all pads zero; Slice that keeps every element (output shape = input shape, all steps 1).
7. Concat of one input; Split into one output.

A removed op's readers read its input instead. When its output is a function output and its
input is a graph input, a constant or another output, the op stays (an output keeps its name).

Before::

    %r: (1,96,128,fp32) = Reshape(data=%x, shape=%s)      # %x: (1,96,128,fp32)
    %y: (1,96,128,fp32) = Add(A=%r, B=%c)

After::

    %y: (1,96,128,fp32) = Add(A=%x, B=%c)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter, const, same_type, scalar
from ..registry import graph_pass


def _transpose_identity(op: Operation) -> bool:
    perm = op.attributes.get("perm")
    return perm is not None and list(perm) == list(range(len(perm)))


def _binary_kept(op: Operation):
    """For x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1: the x."""
    a, b = op.inputs[0], op.inputs[1]
    neutral = 0.0 if op.op_type in ("Add", "Sub") else 1.0
    if scalar(b) == neutral:
        return a
    if op.op_type in ("Add", "Mul") and scalar(a) == neutral:
        return b
    return None


def _kept_input(op: Operation):
    """The input ``op`` passes through unchanged, or None."""
    t = op.op_type
    if op.domain:
        return None
    x = op.inputs[0] if op.inputs else None
    if t == "Identity":
        return x
    if t == "Dropout":
        mode = op.inputs[2] if len(op.inputs) > 2 else None
        mask_read = len(op.outputs) > 1 and bool(op.outputs[1].uses)
        if mask_read or (mode is not None and (const(mode) is None or bool(const(mode).reshape(-1)[0]))):
            return None
        return x
    if t in ("Add", "Sub", "Mul", "Div"):
        keep = _binary_kept(op)
        return keep if keep is not None and same_type(keep, op.outputs[0]) else None
    if x is None or not same_type(x, op.outputs[0]):
        return None
    if t == "Cast" or t in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile"):
        return x
    if t == "Transpose" and _transpose_identity(op):
        return x
    if t == "Pad":
        pads = const(op.inputs[1])
        return x if pads is not None and not np.any(pads) else None
    if t == "Slice":
        steps = const(op.inputs[4]) if len(op.inputs) > 4 else None
        if len(op.inputs) > 4 and op.inputs[4] is not None and (steps is None or np.any(steps != 1)):
            return None
        return x  # same shape with steps 1: every element, in order
    if t == "Concat" and len(op.inputs) == 1:
        return x
    if t == "Split" and len(op.outputs) == 1:
        return x
    return None


@graph_pass("cleanup::noop_elimination")
def noop_elimination(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        x = _kept_input(op)
        if x is None or x is op.outputs[0]:
            continue
        if rw.substitute(op.outputs[0], x, block):
            rw.drop(op)
            changed = True
    return changed
