"""optimize_repeat_ops::keep_reduced_dims — a reduction that drops its axes, reshaped back to the
kept-dims shape, is the reduction that keeps them.

A TFLite ``MEAN`` with ``keep_dims`` false followed by ``RESHAPE`` to ``[N, 1, 1, C]`` (the
pooling of a squeeze-and-excitation block as Keras exports it) arrives as a ReduceMean with
keepdims=0 and a Reshape whose target is computed at run time from the reduction's own Shape
when the batch is symbolic. With ``keepdims=1`` the values are the same and the layout passes
(``transpose_regions``) can move the reduction; the Shape arithmetic becomes dead.

Rule: ``Reshape(ReduceX(x, axes, keepdims=0), s)`` or ``Unsqueeze(…)`` whose output type is the
kept-dims type exactly (x's shape with the reduced axes set to 1; every dim a number or a
symbol, a symbol being one size wherever it appears) becomes ``ReduceX(x, axes, keepdims=1)``.
The reduction's axes must be constant; the reduction stays where something else reads it.

Before::

    %m: (N,32,fp32) = ReduceMean(data=%x, axes=[1, 2], keepdims=0)    # %x: (N,7,7,32,fp32)
    %y: (N,1,1,32,fp32) = Reshape(data=%m, shape=%s)

After::

    %y: (N,1,1,32,fp32) = ReduceMean(data=%x, axes=[1, 2], keepdims=1)
"""

from __future__ import annotations

from offload.ir import Program, TensorType

from ..pattern import Rewriter, const
from ..registry import graph_pass
from .transpose_regions import REDUCTIONS


def _kept_shape(reduction) -> list | None:
    """The shape ``reduction`` has with keepdims=1, or None when its axes or input shape are not
    known well enough to say."""
    t = reduction.inputs[0].type if reduction.inputs[0] is not None else None
    if not isinstance(t, TensorType) or t.shape is None or any(d is None for d in t.shape):
        return None
    if len(reduction.inputs) > 1 and reduction.inputs[1] is not None:
        axes = const(reduction.inputs[1])
        if axes is None or axes.ndim > 1:
            return None
        axes = [int(a) for a in axes.reshape(-1)]
    else:
        axes = [int(a) for a in reduction.attributes.get("axes") or []]
    R = len(t.shape)
    if not axes:
        if reduction.attributes.get("noop_with_empty_axes", 0):
            return None
        axes = list(range(R))
    if any(not -R <= a < R for a in axes):
        return None
    reduced = {a % R for a in axes}
    return [1 if i in reduced else d for i, d in enumerate(t.shape)]


@graph_pass("optimize_repeat_ops::keep_reduced_dims")
def keep_reduced_dims(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type not in ("Reshape", "Unsqueeze") or op.domain or not rw.alive(op):
            continue
        red = op.inputs[0].producer if op.inputs[0] is not None else None
        if (
            red is None
            or red.op_type not in REDUCTIONS
            or red.domain
            or red.block is not block
            or red.attributes.get("keepdims", 1)
        ):
            continue
        out = op.outputs[0].type
        kept = _kept_shape(red)
        if kept is None or not isinstance(out, TensorType) or out.shape is None or list(out.shape) != kept:
            continue
        attrs = {**red.attributes, "keepdims": 1}
        keeping = rw.build(block, red.op_type, list(red.inputs), attrs, before=op, stem=op.outputs[0].name)
        if keeping.outputs[0].type != out:
            block.remove(keeping)
            continue
        if not rw.replace_op(op, keeping):
            continue
        rw.drop(red, op)
        changed = True
    return changed
