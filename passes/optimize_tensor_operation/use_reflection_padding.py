"""optimize_tensor_operation::use_reflection_padding — a reflection built from one-element slices is a reflect Pad.

Rule: ``Concat([Slice(x)…, x, Slice(x)…], axis=k)``, with ``x`` of static shape, ``n`` its
extent on ``k``, and every slice a constant one-element slice of ``x`` on ``k`` alone (step 1):
the ``p`` slices before ``x`` at positions ``p, p-1, …, 1`` and the ``q`` slices after it at
``n-2, n-3, …, n-1-q``, becomes ``Pad(x, mode='reflect')`` with ``p`` before and ``q`` after on
``k``: the same copies of the same elements.

Before::

    %l: (1,2,6,1,fp32) = Slice(data=%x, starts=[1], ends=[2], axes=[3])
    %r: (1,2,6,1,fp32) = Slice(data=%x, starts=[-2], ends=[-1], axes=[3])
    %y: (1,2,6,10,fp32) = Concat(%l, %x, %r, axis=3)          # %x: (1,2,6,8,fp32)

After::

    %y: (1,2,6,10,fp32) = Pad(data=%x, pads=[0, 0, 0, 1, 0, 0, 0, 1], mode='reflect')
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, const, static_shape
from ..registry import graph_pass


def _single_index(op: Operation | None, x: Value, axis: int, n: int) -> int | None:
    """For ``op`` a Slice of ``x`` taking one element on ``axis`` (extent ``n``), with step 1: its index."""
    if op is None or op.op_type != "Slice" or op.domain or op.inputs[0] is not x:
        return None
    ins = list(op.inputs) + [None] * (5 - len(op.inputs))
    starts, ends = const(ins[1]), const(ins[2])
    axes = np.arange(len(static_shape(x))) if ins[3] is None else const(ins[3])
    steps = None if ins[4] is None else const(ins[4])
    if starts is None or ends is None or axes is None or (ins[4] is not None and steps is None):
        return None
    if (
        starts.size != 1
        or ends.size != 1
        or axes.size != 1
        or (steps is not None and steps.reshape(-1)[0] != 1)
    ):
        return None
    if int(axes.reshape(-1)[0]) % len(static_shape(x)) != axis:
        return None
    start, end = int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return start if end - start == 1 else None


@graph_pass("optimize_tensor_operation::use_reflection_padding")
def use_reflection_padding(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, concat in rw.ops():
        if concat.op_type != "Concat" or concat.domain or len(concat.inputs) < 2:
            continue
        for middle, x in enumerate(concat.inputs):
            shape = static_shape(x)
            if shape is None:
                continue
            k = concat.attributes.get("axis", 0) % len(shape)
            n = shape[k]
            before = [_single_index(v.producer, x, k, n) for v in concat.inputs[:middle]]
            after = [_single_index(v.producer, x, k, n) for v in concat.inputs[middle + 1 :]]
            p, q = len(before), len(after)
            if before != list(range(p, 0, -1)) or after != list(range(n - 2, n - 2 - q, -1)):
                continue
            if p + q == 0 or max(p, q) >= n:
                continue
            pads = [0] * (2 * len(shape))
            pads[k], pads[len(shape) + k] = p, q
            pads_v = rw.constant(block, np.array(pads, np.int64), stem=f"{concat.outputs[0].name}_pads")
            pad = rw.build(
                block, "Pad", [x, pads_v], {"mode": "reflect"}, before=concat, stem=concat.outputs[0].name
            )
            if rw.replace_op(concat, pad):
                rw.drop(*(v.producer for v in concat.inputs if v is not x), concat)
                changed = True
            break
    return changed
