"""SLICE and STRIDED_SLICE whose begin, size or end are computed (a loop body indexing by its
counter), and REVERSE_V2.

The rules in ``tflite_tensor_ops.py`` read constant arguments into constant Slice inputs; these build the
same Slice inputs with ops when an argument is a tensor computed at run time. The masks of
STRIDED_SLICE are options, so they stay static: an axis in begin_mask (end_mask) takes the whole
range's start (end) by a Where over a constant mask, a shrink axis ends one past its begin (or at
the end for begin -1); indexing single elements of some axes and taking the others whole (``xs[i]``)
is a Gather per indexed axis instead. The strides must be constant (a stride picks a direction, and ONNX's
defaults for a masked begin or end depend on it).
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from .tflite_node import rule

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def _int64(node, i: int):
    v = node.inputs[i]
    if v.const_value is not None:
        return node.ints(v.const_value.astype(np.int64).reshape(-1))
    flat = node.one("Reshape", [v, node.ints([-1])])
    return node.one("Cast", [flat], {"to": int(DataType.INT64)})


def dynamic_slice(node) -> list:
    """SLICE(x, begin, size): ends are begin + size, or the axis end where size is -1."""
    begin, size = _int64(node, 1), _int64(node, 2)
    ends = node.one(
        "Where",
        [node.one("Less", [size, node.ints(0)]), node.ints(INT64_MAX), node.one("Add", [begin, size])],
    )
    return node.op("Slice", [node.inputs[0], begin, ends])


def dynamic_strided_slice(node) -> list:
    strides = node.const(3).astype(np.int64).reshape(-1).copy()
    rank = len(strides)
    if (strides == 0).any():
        raise node.fail("a stride is 0")
    begin_mask, end_mask, shrink = node.opt("begin_mask"), node.opt("end_mask"), node.opt("shrink_axis_mask")
    bits = np.array([1 << a for a in range(rank)])
    shrunk = (shrink & bits) != 0
    masked_begin = ((begin_mask & bits) != 0) & ~shrunk
    masked_end = ((end_mask & bits) != 0) & ~shrunk
    begin, end = _int64(node, 1), _int64(node, 2)
    if all(shrunk | (masked_begin & masked_end & (strides == 1))):
        # x[..., i, ...]: a Gather per shrunk axis, its index a data input (a Slice's start is
        # a shape-deciding input the GPU backends read on the host, so a loop could not run there)
        y = node.inputs[0]
        for a in reversed(np.flatnonzero(shrunk).tolist()):
            index = node.one("Gather", [begin, node.ints(a)], {"axis": 0})
            y = node.one("Gather", [y, index], {"axis": a})
        return [y]
    if masked_begin.any():
        start = np.where(strides > 0, 0, INT64_MAX)
        begin = node.one("Where", [node.imp.const(masked_begin), node.ints(start), begin])
    if masked_end.any():
        stop = np.where(strides > 0, INT64_MAX, INT64_MIN)
        end = node.one("Where", [node.imp.const(masked_end), node.ints(stop), end])
    if shrunk.any():
        last = node.one("Equal", [begin, node.ints(-1)])
        one_past = node.one("Where", [last, node.ints(INT64_MAX), node.one("Add", [begin, node.ints(1)])])
        end = node.one("Where", [node.imp.const(shrunk), one_past, end])
        strides[shrunk] = 1
    y = node.one("Slice", [node.inputs[0], begin, end, node.ints(np.arange(rank)), node.ints(strides)])
    dropped = [a for a in range(rank) if shrunk[a]]
    return node.op("Squeeze", [y, node.ints(dropped)]) if dropped else [y]


@rule("REVERSE_V2", version=3, inputs=2)
def reverse_v2(node) -> list:
    """The axes listed (a constant) reversed: a Slice from the last element back, step -1."""
    axes = node.const(1).astype(np.int64).reshape(-1)
    n = len(axes)
    ends = node.ints([INT64_MIN] * n)
    return node.op("Slice", [node.inputs[0], node.ints([-1] * n), ends, node.ints(axes), node.ints([-1] * n)])
