"""TFLite builtin operators on shapes as IR ops: reductions, reshapes, slices, gathers, broadcasts."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .tflite_node import INT64_MAX, INT64_MIN, Node, _cast_to_output, _int64, _out_dtype, rule
from .tflite_slices import dynamic_slice, dynamic_strided_slice

# ---------------------------------------------------------------------------------------------
# Rules: reductions and shapes.

REDUCE = {
    "MEAN": "ReduceMean",
    "SUM": "ReduceSum",
    "REDUCE_MAX": "ReduceMax",
    "REDUCE_MIN": "ReduceMin",
    "REDUCE_PROD": "ReduceProd",
}


@rule(*REDUCE, version=2, inputs=2)
def reduce(node: Node) -> list:
    axes = node.const(1).reshape(-1)
    attrs = {"keepdims": int(bool(node.opt("keep_dims")))}
    if axes.size == 0:
        attrs["noop_with_empty_axes"] = 1  # TFLite reduces over the axes listed: none
    return node.op(REDUCE[node.name], [node.inputs[0], node.ints(axes)], attrs)


def new_shape(node: Node) -> np.ndarray | Value:
    """RESHAPE's new shape: its values where the file gives them (a constant shape input, the
    new_shape option, or else the output tensor's shape), the computed shape input as int64."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        shape = node.inputs[1]
        if shape.const_value is not None:
            return shape.const_value.reshape(-1)
        return node.one("Cast", [shape], {"to": int(DataType.INT64)})
    if node.options is not None and node.opt("new_shape") is not None:
        return np.asarray(node.opt("new_shape"))
    return np.asarray(node.shape(0, output=True))


def reshape_attrs(dims: np.ndarray | Value) -> dict:
    """TFLite's 0 is a dimension of size 0; ONNX copies the input's dimension unless allowzero."""
    return {"allowzero": 1} if isinstance(dims, np.ndarray) and 0 in dims else {}


@rule("RESHAPE", version=1)
def reshape(node: Node) -> list:
    dims = new_shape(node)
    shape = node.ints(dims) if isinstance(dims, np.ndarray) else dims
    return node.op("Reshape", [node.inputs[0], shape], reshape_attrs(dims))


@rule("TRANSPOSE", version=6, inputs=2)
def transpose(node: Node) -> list:
    return node.op("Transpose", node.inputs[:1], {"perm": [int(p) for p in node.const(1).reshape(-1)]})


@rule("CONCATENATION", version=4)
def concatenation(node: Node) -> list:
    y = node.one("Concat", node.inputs, {"axis": int(node.opt("axis"))})
    return [node.activation(y)]


@rule("PAD", "PADV2", version=4, inputs=2)
def pad(node: Node) -> list:
    paddings = node.const(1).astype(np.int64).reshape(-1, 2)
    inputs = [node.inputs[0], node.ints(np.concatenate([paddings[:, 0], paddings[:, 1]]))]
    if node.name == "PADV2" and len(node.inputs) > 2 and node.inputs[2] is not None:
        inputs.append(node.one("Reshape", [node.inputs[2], node.ints([])]))
    return node.op("Pad", inputs)


@rule("SQUEEZE", version=1)
def squeeze(node: Node) -> list:
    dims = node.opt("squeeze_dims") if node.options is not None else None
    if dims is None or len(dims) == 0:
        return node.op("Squeeze", node.inputs[:1])
    return node.op("Squeeze", [node.inputs[0], node.ints(dims)])


@rule("EXPAND_DIMS", version=1, inputs=2)
def expand_dims(node: Node) -> list:
    return node.op("Unsqueeze", [node.inputs[0], node.ints(node.const(1).reshape(-1))])


@rule("SLICE", version=6, inputs=3)
def slice_(node: Node) -> list:
    if node.inputs[1].const_value is None or node.inputs[2].const_value is None:
        return dynamic_slice(node)  # begin or size computed (a loop body's index)
    begin = node.const(1).astype(np.int64).reshape(-1)
    size = node.const(2).astype(np.int64).reshape(-1)
    end = np.where(size < 0, INT64_MAX, begin + size)
    return node.op("Slice", [node.inputs[0], node.ints(begin), node.ints(end)])


@rule("STRIDED_SLICE", version=8, inputs=4)
def strided_slice(node: Node) -> list:
    for field in ("ellipsis_mask", "new_axis_mask"):
        if node.opt(field):
            raise node.unsupported(f"{field} {node.opt(field)} is not supported")
    if node.opt("offset"):
        raise node.unsupported("offset=true is not supported")
    if node.inputs[1].const_value is None or node.inputs[2].const_value is None:
        return dynamic_strided_slice(node)  # begin or end computed
    begin, end, strides = (node.const(i).astype(np.int64).reshape(-1).copy() for i in (1, 2, 3))
    if not len(begin) == len(end) == len(strides) or (strides == 0).any():
        raise node.fail("begin, end and strides differ in length or a stride is 0")
    begin_mask, end_mask, shrink = node.opt("begin_mask"), node.opt("end_mask"), node.opt("shrink_axis_mask")
    for axis, step in enumerate(strides):
        bit = 1 << axis
        if shrink & bit:  # one element: the begin index, the axis dropped afterwards
            end[axis] = begin[axis] + 1 if begin[axis] != -1 else INT64_MAX
            strides[axis] = 1
            continue
        if begin_mask & bit:
            begin[axis] = 0 if step > 0 else INT64_MAX
        if end_mask & bit:
            end[axis] = INT64_MAX if step > 0 else INT64_MIN
    axes = np.arange(len(begin))
    y = node.one(
        "Slice", [node.inputs[0], node.ints(begin), node.ints(end), node.ints(axes), node.ints(strides)]
    )
    dropped = [a for a in range(len(begin)) if shrink & (1 << a)]
    return node.op("Squeeze", [y, node.ints(dropped)]) if dropped else [y]


@rule("GATHER", version=7, inputs=2)
def gather(node: Node) -> list:
    if node.opt("batch_dims"):
        raise node.unsupported(f"batch_dims {node.opt('batch_dims')} is not supported")
    return node.op("Gather", node.inputs[:2], {"axis": int(node.opt("axis"))})


@rule("SPLIT", version=4, inputs=2)
def split(node: Node) -> list:
    axis = node.axis(0)
    return node.op(
        "Split", [node.inputs[1]], {"axis": axis, "num_outputs": len(node.outputs)}, len(node.outputs)
    )


@rule("SPLIT_V", version=2, inputs=3)
def split_v(node: Node) -> list:
    sizes = node.const(1).astype(np.int64).reshape(-1).copy()
    axis = node.axis(2)
    if (sizes < 0).sum() == 1:  # one size -1: whatever the others leave of the axis
        shape = node.shape(0)
        if not -len(shape) <= axis < len(shape):
            raise node.fail(f"axis {axis} is outside rank {len(shape)}")
        dim = shape[axis]
        sizes[sizes < 0] = dim - sizes[sizes >= 0].sum()
    return node.op("Split", [node.inputs[0], node.ints(sizes)], {"axis": axis}, len(node.outputs))


@rule("PACK", version=4)
def pack(node: Node) -> list:
    axis = node.ints([int(node.opt("axis"))])
    parts = [node.one("Unsqueeze", [x, axis]) for x in node.inputs]
    return node.op("Concat", parts, {"axis": int(node.opt("axis"))})


# ---------------------------------------------------------------------------------------------
# Rules: shapes made at run time.


@rule("BROADCAST_TO", version=3, inputs=2)
def broadcast_to(node: Node) -> list:
    return node.op("Expand", [node.inputs[0], _int64(node, 1)])


@rule("TILE", version=3, inputs=2)
def tile(node: Node) -> list:
    return node.op("Tile", [node.inputs[0], _int64(node, 1)])


@rule("FILL", version=4, inputs=2)
def fill(node: Node) -> list:
    value = node.one("Reshape", [node.inputs[1], node.ints([])])
    return node.op("Expand", [value, _int64(node, 0)])


@rule("ZEROS_LIKE", version=1)
def zeros_like(node: Node) -> list:
    zero = node.imp.const(np.zeros((), _out_dtype(node).numpy))
    return node.op("Expand", [zero, node.one("Shape", node.inputs[:1])])


@rule("SHAPE", version=1)
def shape(node: Node) -> list:
    return [_cast_to_output(node, node.one("Shape", node.inputs[:1]))]


@rule("RANGE", version=2, inputs=3)
def range_(node: Node) -> list:
    scalars = [node.one("Reshape", [v, node.ints([])]) for v in node.inputs[:3]]
    return node.op("Range", scalars)
