"""optimize_tensor_operation::concat_to_pixel_shuffle — two levels of interleaving are one DepthToSpace.

ONNX has no interleaving concat: interleaving ``u`` and ``v`` (same static NCHW shape) on axis
``b`` is ``Reshape(Concat([Unsqueeze(u, b+1), Unsqueeze(v, b+1)], axis=b+1))`` merging the new
axis into axis ``b`` (``u`` at even, ``v`` at odd positions), the form the Core ML importer
writes for MIL's ``concat(interleave=True)``. Rule: an interleave of two interleaves, one level
on H (axis 2) and the other on W (axis 3), every intermediate read by nothing else, is

- outer W of inner H pairs ``(x1, x2)``, ``(x3, x4)``: y[2i+p, 2j+q] = x_{1+p+2q}[i, j], which is
  ``DepthToSpace(Concat([x1, x3, x2, x4], axis=1), blocksize=2, mode="DCR")``;
- outer H of inner W pairs: y[2i+p, 2j+q] = x_{1+2p+q}, the same with ``[x1, x2, x3, x4]``.

(DCR reads channel block ``2p+q`` for output offset (p, q).) The same elements move to the same
places: the result is exact. Other pairings (two levels on one axis, three inputs, mixed
shapes, an intermediate someone else reads) stay.

Before::

    %a: (1,2,8,4) = <interleave on H of %x1, %x2>
    %b: (1,2,8,4) = <interleave on H of %x3, %x4>
    %y: (1,2,8,8) = <interleave on W of %a, %b>

After::

    %c: (1,8,4,4) = Concat(%x1, %x3, %x2, %x4, axis=1)
    %y: (1,2,8,8) = DepthToSpace(%c, blocksize=2, mode="DCR")
"""

from __future__ import annotations

from offload.ir import Operation, Program, Value

from ..optimize_conv.compose_conv1d import _one_axis
from ..pattern import Rewriter, static_shape
from ..registry import graph_pass


def _interleave(rw: Rewriter, reshape: Operation | None) -> tuple[list[Value], int, list[Operation]] | None:
    """(inputs, axis, ops producers-first) when ``reshape`` ends an interleave of two rank-4
    tensors of one static shape."""
    if reshape is None or reshape.op_type != "Reshape" or reshape.domain:
        return None
    concat = reshape.inputs[0].producer
    if concat is None or concat.op_type != "Concat" or concat.domain or len(concat.inputs) != 2:
        return None
    if rw.only_user(concat.outputs[0]) is not reshape:
        return None
    stacked = static_shape(concat.outputs[0])
    if stacked is None or len(stacked) != 5:
        return None
    a = concat.attributes.get("axis", 0) % 5
    sources, unsqueezes = [], []
    for u in concat.inputs:
        p = None if u is None else u.producer
        if (
            p is None
            or p.op_type != "Unsqueeze"
            or p.domain
            or _one_axis(p, 5) != a
            or rw.only_user(u) is not concat
        ):
            return None
        sources.append(p.inputs[0])
        unsqueezes.append(p)
    shapes = {static_shape(x) for x in sources}
    if len(shapes) != 1 or None in shapes or a not in (3, 4):
        return None
    (s,) = shapes
    b = a - 1  # the axis the new one merges into
    if static_shape(reshape.outputs[0]) != s[:b] + (2 * s[b],) + s[b + 1 :]:
        return None
    return sources, b, [*unsqueezes, concat, reshape]


@graph_pass("optimize_tensor_operation::concat_to_pixel_shuffle")
def concat_to_pixel_shuffle(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if not rw.alive(op):
            continue
        outer = _interleave(rw, op)
        if outer is None:
            continue
        (first, second), b, outer_ops = outer
        inner = [_interleave(rw, v.producer) for v in (first, second)]
        if None in inner or any(rw.only_user(v) is None for v in (first, second)):
            continue
        (x1, x2), b1, ops1 = inner[0]
        (x3, x4), b2, ops2 = inner[1]
        if b1 != b2 or {b, b1} != {2, 3} or static_shape(x1) != static_shape(x3):
            continue
        order = [x1, x3, x2, x4] if b == 3 else [x1, x2, x3, x4]
        cat = rw.build(block, "Concat", order, {"axis": 1}, before=op, stem=f"{op.outputs[0].name}_blocks")
        shuffle = rw.build(
            block,
            "DepthToSpace",
            [cat.outputs[0]],
            {"blocksize": 2, "mode": "DCR"},
            before=op,
            stem=op.outputs[0].name,
        )
        if rw.replace_op(op, shuffle):
            rw.drop(*ops1, *ops2, *outer_ops)
            changed = True
        else:
            rw.drop(cat)
    return changed
