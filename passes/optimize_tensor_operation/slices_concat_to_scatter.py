"""optimize_tensor_operation::slices_concat_to_scatter — a row written into a loop's array is a ScatterND.

Not in the catalog (offload's addition). TFLite's converter writes a TensorList item inside a
WHILE body (Keras 3's LSTM, ``TensorArray.write``) as the rows before ``i``, the new row, and
the rows after it, concatenated::

    Concat(Slice(A, [0, 0, …], [i, …]), X, Slice(A, [i + 1, 0, …], [n, …]), axis=0)

The two slices change shape every iteration, so a GPU backend (which plans static shapes) can
take neither them nor the loop. The same array with row ``i`` replaced is
``ScatterND(A, [[i]], X)``, whose shapes never change.

Rule: a Concat on axis 0 of three inputs ``P, X, Q`` inside a Loop body, where ``P`` and ``Q``
are Slices of one array ``A`` of static shape (n, …) (no axes or steps inputs), ``X`` has
shape (1, …) with A's other dims, and the slices' starts and ends are computed from constants and
one counter ``i`` alone: the Loop's iteration number, or a carried integer that starts at a
constant c and grows by 1 per iteration. With a constant trip count M, every ``i`` the loop can
see (c … c + M − 1) is tried: each must lie in [0, n) and give ``P`` = rows [0, i) and ``Q`` =
rows [i + 1, n) of A, all of its other axes (ONNX's clamping of starts and ends applied). Only
then the Concat becomes ``ScatterND(A, Reshape(Cast(i, int64), [1, 1]), X)``: equal bit for bit
(rows are moved, never computed).

Before::

    %p: (?,2,5,fp32) = Slice(data=%A, starts=%zeros, ends=%e)      # %e = [i, 2, 5] computed
    %q: (?,2,5,fp32) = Slice(data=%A, starts=%s, ends=%full)       # %s = [i + 1, 0, 0]
    %y: (?,2,5,fp32) = Concat(in0=%p, in1=%x, in2=%q, axis=0)      # %x: (1,2,5,fp32)

After::

    %k: (1,1,i64) = Reshape(data=%i64, shape=[1, 1])
    %y: (6,2,5,fp32) = ScatterND(data=%A, indices=%k, updates=%x)
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Operation, Program, TensorType, Value
from offload.ir.infer_fold import fold_values

from ..pattern import Rewriter, const, static_shape
from ..registry import graph_pass

MAX_TRIES = 4096  # counter values checked; a longer loop is left as it is
MAX_DEPTH = 12  # ops between a bound and its leaves


def _leaves(v: Value, out: set, depth: int = 0) -> bool:
    """Collect the non-constant leaves of ``v``'s expression (block parameters); False when it
    is deeper than MAX_DEPTH or goes through an op with several outputs or nested blocks."""
    if v.const_value is not None:
        return True
    op = v.producer
    if op is None:
        out.add(v)
        return True
    if depth > MAX_DEPTH or len(op.outputs) != 1 or op.blocks:
        return False
    return all(x is None or _leaves(x, out, depth + 1) for x in op.inputs)


def _value(v: Value, leaf: Value, at: int) -> np.ndarray | None:
    """``v``'s value when ``leaf`` holds ``at`` (folded op by op with ``ir.infer_fold.fold_op``)."""
    if v is leaf:
        return np.asarray(at, v.type.dtype.numpy)
    if v.const_value is not None:
        return v.const_value
    op = v.producer
    args = [None if x is None else _value(x, leaf, at) for x in op.inputs]
    if any(a is None for x, a in zip(op.inputs, args) if x is not None):
        return None
    return fold_values(op.op_type, args, op.attributes, v.type, op.domain)


def _rows(start: np.ndarray, end: np.ndarray, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """The [from, to) range a Slice (no axes, no steps) takes along each axis, ONNX's clamping
    applied, or None when the bounds do not cover every axis."""
    start, end = np.asarray(start).reshape(-1), np.asarray(end).reshape(-1)
    if start.size != len(shape) or end.size != len(shape):
        return None
    out = []
    for s, e, d in zip(start.tolist(), end.tolist(), shape):
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        out.append((min(max(s, 0), d), min(max(e, 0), d)))
    return out


def _counter(loop: Operation, body, i: Value) -> range | None:
    """The values ``i`` takes in the loop: its iteration number, or a carried integer that
    starts at a constant and grows by 1 (a constant trip count bounds both)."""
    m = const(loop.inputs[0]) if loop.inputs and loop.inputs[0] is not None else None
    if m is None or m.size != 1:
        return None
    trips = int(m.reshape(-1)[0])
    if i is body.inputs[0]:
        return range(0, trips)
    carried = list(body.inputs[2:])
    if not any(p is i for p in carried):
        return None
    j = next(k for k, p in enumerate(carried) if p is i)
    initial = const(loop.inputs[2 + j])
    update = body.outputs[1 + j].producer
    if initial is None or initial.size != 1 or update is None or update.op_type != "Add" or update.domain:
        return None
    a, b = update.inputs
    step = const(b) if a is i else const(a) if b is i else None
    if step is None or step.size != 1 or int(step.reshape(-1)[0]) != 1:
        return None
    c = int(initial.reshape(-1)[0])
    return range(c, c + trips)


def _matches(p: Operation, q: Operation, body, loop: Operation, shape: tuple[int, ...]) -> Value | None:
    """The counter when ``p`` and ``q`` slice rows [0, i) and [i + 1, n) for every i it takes."""
    leaves: set = set()
    bounds = [p.inputs[1], p.inputs[2], q.inputs[1], q.inputs[2]]
    if not all(_leaves(v, leaves) for v in bounds) or len(leaves) != 1:
        return None
    (i,) = leaves
    if not isinstance(i.type, TensorType) or i.type.dtype.numpy.kind not in "iu":
        return None
    values = _counter(loop, body, i)
    if values is None or len(values) > MAX_TRIES:
        return None
    n, rest = shape[0], [(0, d) for d in shape[1:]]
    for at in values:
        found = [_value(v, i, at) for v in bounds]
        if any(f is None for f in found) or not 0 <= at < n:
            return None
        before, after = _rows(found[0], found[1], shape), _rows(found[2], found[3], shape)
        if before != [(0, at), *rest] or after != [(at + 1, n), *rest]:
            return None
    return i


@graph_pass("optimize_tensor_operation::slices_concat_to_scatter")
def slices_concat_to_scatter(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, cat in rw.ops():
        loop = block.parent
        if (
            cat.op_type != "Concat"
            or cat.domain
            or len(cat.inputs) != 3
            or cat.attributes.get("axis") != 0
            or loop is None
            or loop.op_type != "Loop"
            or not rw.alive(cat)
        ):
            continue
        p, q = (v.producer if v is not None else None for v in (cat.inputs[0], cat.inputs[2]))
        if not all(
            s is not None and s.op_type == "Slice" and not s.domain and len(s.inputs) == 3 for s in (p, q)
        ):
            continue
        data = p.inputs[0]
        shape, row = static_shape(data), static_shape(cat.inputs[1])
        if q.inputs[0] is not data or shape is None or not shape or row != (1, *shape[1:]):
            continue
        i = _matches(p, q, block, loop, shape)
        if i is None:
            continue
        stem = cat.outputs[0].name
        index = i
        if i.type.dtype != DataType.INT64:
            index = rw.build(block, "Cast", [i], {"to": int(DataType.INT64)}, before=cat, stem=stem).outputs[
                0
            ]
        to_2d = rw.constant(block, np.array([1, 1], np.int64), stem=f"{stem}_index_shape")
        k = rw.build(block, "Reshape", [index, to_2d], before=cat, stem=stem).outputs[0]
        scatter = rw.build(block, "ScatterND", [data, k, cat.inputs[1]], before=cat, stem=stem)
        if rw.replace_op(cat, scatter):
            rw.drop(p, q, cat)
            changed = True
    return changed
