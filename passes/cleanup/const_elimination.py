"""cleanup::const_elimination — compute ops whose inputs are all known, store the result.

Rule: an op whose inputs are all constants (or, for Shape and Size, whose input shape is
static) is run once now, on the CPU executor's kernels, and each output becomes a constant
of the op's block. Skipped: results larger than ``MAX_ELEMENTS`` elements (a file-size limit:
a folded ConstantOfShape weight is stored in the .pte), random ops (each run differs), ops
with nested blocks, non-tensor results, results that are function outputs (their names are
the interface), and ops whose kernel fails (the failure belongs to run time).

Folding with the static shapes inference found makes ``Shape → Gather → Concat → Reshape``
chains of static models disappear: the Reshape reads a constant shape afterwards. A Gather of
constant indices from a Shape also folds when the dims it picks are static though others are
not (an exporter's ``x.shape[1] == 1`` test of a tensor of symbolic length).

Before::

    block main(%x: (1,3,4,4,fp32)) {
        %s: (4,i64) = Shape(data=%x)
        %i: (i64) = const
        %d: (i64) = Gather(data=%s, indices=%i, axis=0)
        %n: (1,i64) = Unsqueeze(data=%d, axes=%a)
        %shape: (2,i64) = Concat(in0=%n, in1=%minus1, axis=0)
        %y: (1,48,fp32) = Reshape(data=%x, shape=%shape)
    } -> (%y)

After::

    block main(%x: (1,3,4,4,fp32)) {
        %shape: (2,i64) = const
        %y: (1,48,fp32) = Reshape(data=%x, shape=%shape)
    } -> (%y)
"""

from __future__ import annotations

import numpy as np

from offload.ir import RANDOM_OPS, DataType, Operation, Program, TensorType
from offload.ir.infer_fold import fold_op
from offload.ir.rewrite import is_function_output, remove_dead_ops

from ..pattern import Rewriter
from ..registry import graph_pass

MAX_ELEMENTS = 1 << 22  # 16 MiB of float32: a conv weight, not an activation of a big model

RANDOM = RANDOM_OPS


def _static_dims(op: Operation) -> np.ndarray | None:
    """``Gather(Shape(x), indices)`` when every dim it picks is a number."""
    shape_op = op.inputs[0].producer
    indices = op.inputs[1].const_value if op.inputs[1] is not None else None
    if shape_op is None or shape_op.op_type != "Shape" or shape_op.domain or indices is None:
        return None
    if op.attributes.get("axis", 0) != 0:
        return None
    t = shape_op.inputs[0].type
    if not isinstance(t, TensorType) or t.shape is None:
        return None
    r = len(t.shape)
    start, end = shape_op.attributes.get("start", 0), shape_op.attributes.get("end", r)
    dims = t.shape[slice(*(min(max(i + r if i < 0 else i, 0), r) for i in (start, end)))]
    n = len(dims)
    if indices.dtype.kind not in "iu" or not all(-n <= i < n for i in indices.reshape(-1).tolist()):
        return None
    picked = [dims[i] for i in indices.reshape(-1).tolist()]
    if not all(isinstance(d, int) for d in picked):
        return None
    return np.array(picked, dtype=np.int64).reshape(indices.shape)


def _compute(op: Operation) -> list | None:
    """The values of ``op``'s outputs, or None when they cannot be computed now."""
    if op.op_type in ("Shape", "Size") and not op.domain:
        value = fold_op(op)
        return None if value is None else [value]
    if op.op_type == "Gather" and not op.domain and op.inputs[0].const_value is None:
        value = _static_dims(op)
        return None if value is None else [value]
    if any(v is not None and v.const_value is None for v in op.inputs):
        return None
    if not any(v is not None for v in op.inputs):
        return None  # an op of no inputs (Constant-like) is a generator, left as it is
    from offload.ir import lookup
    from offload.runtime import kernels
    from offload.runtime.evaluate import KernelContext

    fn = kernels.find(op.domain, op.op_type)
    schema = lookup(op.domain, op.op_type)
    if fn is None or schema is None:
        return None
    args = [None if v is None else v.const_value for v in op.inputs]
    attrs = schema.with_defaults(op.attributes)
    try:
        with np.errstate(all="ignore"):
            results = kernels.invoke(fn, KernelContext(op, None), args, attrs, "")
    except Exception:  # the kernel reports this at run time, with the inputs a user gives
        return None
    return [r if r is None or isinstance(r, np.ndarray) else np.asarray(r) for r in results]


def _fits(value, declared) -> bool:
    if not isinstance(value, np.ndarray) or value.dtype == object or value.size > MAX_ELEMENTS:
        return False
    if not isinstance(declared, TensorType):
        return False
    try:
        dtype = DataType.from_numpy(value.dtype)
    except (KeyError, ValueError, TypeError):
        return False
    if dtype != declared.dtype or (declared.shape is not None and len(declared.shape) != value.ndim):
        return False
    return declared.shape is None or all(
        not isinstance(d, int) or d == s for d, s in zip(declared.shape, value.shape)
    )


@graph_pass("cleanup::const_elimination")
def const_elimination(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, op in rw.ops():
        if op.op_type in RANDOM or op.blocks or op.block is None:
            continue
        outputs = [o for o in op.outputs if o.name and (o.uses or rw.returned(o))]
        if not outputs or any(is_function_output(o, block) for o in outputs):
            continue
        values = _compute(op)
        if values is None:
            continue
        pairs = [(o, values[o.index]) for o in outputs if o.index < len(values)]
        if len(pairs) != len(outputs) or not all(_fits(v, o.type) for o, v in pairs):
            continue
        for out, value in pairs:
            c = rw.constant(block, value if value.flags.c_contiguous else value.copy(), stem=out.name)
            rw.substitute(out, c, block)
        changed = True
    if changed:
        for fn in program.functions.values():
            remove_dead_ops(fn.body, constants=False)
    return changed
