"""optimize_tensor_operation::replace_stack_reshape — stacking then merging the new axis into the next is a Concat.

ONNX has no stack op: a stack of ``x_1 … x_n`` on axis ``a`` is ``Concat([Unsqueeze(x_i, a) …],
axis=a)``. Rule: such a stack (every Concat input an Unsqueeze on ``a`` of a tensor of one
static shape), read only by a Reshape whose output merges the new axis with the axis right
after it (shape ``s[:a] + [n·s[a]] + s[a+1:]``), becomes ``Concat([x_1 … x_n], axis=a)``: the
same elements in the same order. Merging the new axis into the axis before it interleaves the
inputs, which ONNX Concat cannot say: that stays (the catalog's ``interleave`` case).

Before::

    %u1: (1,1,5,3,fp32) = Unsqueeze(data=%x1, axes=[1])
    %u2: (1,1,5,3,fp32) = Unsqueeze(data=%x2, axes=[1])
    %s: (1,2,5,3,fp32) = Concat(%u1, %u2, axis=1)
    %y: (1,10,3,fp32) = Reshape(data=%s, shape=[1, 10, 3])

After::

    %y: (1,10,3,fp32) = Concat(%x1, %x2, axis=1)
"""

from __future__ import annotations

from offload.ir import Program

from ..optimize_conv.compose_conv1d import _one_axis
from ..pattern import Rewriter, static_shape
from ..registry import graph_pass


@graph_pass("optimize_tensor_operation::replace_stack_reshape")
def replace_stack_reshape(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, concat in rw.ops():
        if concat.op_type != "Concat" or concat.domain or not rw.alive(concat):
            continue
        stacked = static_shape(concat.outputs[0])
        reshape = rw.only_user(concat.outputs[0])
        if stacked is None or reshape is None or reshape.op_type != "Reshape" or reshape.domain:
            continue
        a = concat.attributes.get("axis", 0) % len(stacked)
        sources = []
        for u in concat.inputs:
            p = None if u is None else u.producer
            if p is None or p.op_type != "Unsqueeze" or p.domain or _one_axis(p, len(stacked)) != a:
                break
            sources.append(p.inputs[0])
        shapes = {static_shape(x) for x in sources}
        if len(sources) != len(concat.inputs) or len(shapes) != 1 or None in shapes:
            continue
        (s,) = shapes
        if a == len(s):  # the new axis is the last: nothing after it to merge into
            continue
        merged = s[:a] + (len(sources) * s[a],) + s[a + 1 :]
        if static_shape(reshape.outputs[0]) != merged:
            continue
        new = rw.build(block, "Concat", sources, {"axis": a}, before=reshape, stem=reshape.outputs[0].name)
        if rw.replace_op(reshape, new):
            rw.drop(*(u.producer for u in concat.inputs), concat, reshape)
            changed = True
    return changed
