"""optimize_tensor_operation::fuse_onehot_matmul_to_gather — a one-hot row times a table is a row of the table.

Rule: ``MatMul(OneHot(i, depth, [0, 1], axis=-1), W)`` with ``i`` int32/int64, ``depth`` a
constant, ``W`` a constant finite (depth, N) float table and the OneHot read by nothing else,
becomes a ``Gather`` of ``W`` at ``i``. OneHot takes ``i`` in [-depth, depth-1] (negative from
the end) and gives an all-zero row outside it, where Gather would fail; so the row gathered
is ``i mod depth`` when ``i`` is in range and otherwise a zero row appended to ``W``:

    k = Where(And(i >= -depth, i < depth), Mod(i, depth), depth)
    y = Gather([W; 0], k, axis=0)

The products 0·w and the one 1·w of the MatMul are exact, so the results are equal (a finite
W, so no 0·inf).

Before::

    %h: (4,100,fp32) = OneHot(indices=%i, depth=%d, values=%v)     # %d = 100, %v = [0, 1]
    %y: (4,16,fp32) = MatMul(A=%h, B=%w)                           # %w: (100,16,fp32)

After::

    %y: (4,16,fp32) = Gather(data=%y_table, indices=%k, axis=0)    # %y_table: (101,16,fp32)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const, rank, scalar
from ..registry import graph_pass


def _row_index(rw: Rewriter, block, anchor, i, depth: int) -> list:
    """The ops computing the row of the padded table for indices ``i``, placed before
    ``anchor``; the last one's output is that row."""
    stem = f"{anchor.outputs[0].name}_row"
    dtype = i.type.dtype.numpy
    d = rw.constant(block, np.array(depth, dtype), stem=f"{stem}_depth")
    neg_d = rw.constant(block, np.array(-depth, dtype), stem=f"{stem}_neg_depth")
    built = []

    def add(op_type, inputs):
        built.append(rw.build(block, op_type, inputs, before=anchor, stem=stem))
        return built[-1].outputs[0]

    ok = add("And", [add("GreaterOrEqual", [i, neg_d]), add("Less", [i, d])])
    add("Where", [ok, add("Mod", [i, d]), d])
    return built


@graph_pass("optimize_tensor_operation::fuse_onehot_matmul_to_gather")
def fuse_onehot_matmul_to_gather(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, onehot in rw.ops():
        if onehot.op_type != "OneHot" or onehot.domain or not rw.alive(onehot):
            continue
        i, depth_v, values_v = onehot.inputs
        r = rank(i)
        if r is None or i.type.dtype.numpy not in (np.dtype(np.int32), np.dtype(np.int64)):
            continue
        if onehot.attributes.get("axis", -1) not in (-1, r):
            continue
        depth, values = scalar(depth_v), const(values_v)
        if depth is None or depth < 1 or values is None or values.reshape(-1).tolist() != [0, 1]:
            continue
        mm = rw.only_user(onehot.outputs[0])
        if mm is None or mm.op_type != "MatMul" or mm.domain or mm.inputs[0] is not onehot.outputs[0]:
            continue
        w = const(mm.inputs[1])
        if (
            w is None
            or w.ndim != 2
            or w.shape[0] != int(depth)
            or w.dtype.kind != "f"
            or not np.isfinite(w).all()
        ):
            continue
        stem = mm.outputs[0].name
        table = np.concatenate([w, np.zeros((1, w.shape[1]), w.dtype)])
        built = _row_index(rw, block, mm, i, int(depth))
        table_v = rw.constant(block, table, stem=f"{stem}_table")
        gather = rw.build(block, "Gather", [table_v, built[-1].outputs[0]], {"axis": 0}, before=mm, stem=stem)
        if rw.replace_op(mm, gather):
            rw.drop(onehot, mm)
            changed = True
        else:
            rw.drop(*built)
    return changed
