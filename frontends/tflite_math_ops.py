"""TFLite builtin math, bitwise and boolean-reduction operators as IR ops: ROUND, ATAN2, ADD_N,
RELU_0_TO_1, RIGHT_SHIFT, BITWISE_XOR, REDUCE_ANY, REDUCE_ALL."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .tflite_node import DTYPES, Node, rule


@rule("ROUND", version=1)
def round_(node: Node) -> list:
    # LiteRT rounds half to even (its RoundToNearest, and XNNPACK's), as ONNX Round does
    return node.op("Round", node.inputs[:1])


@rule("ADD_N", version=1)
def add_n(node: Node) -> list:
    return node.op("Sum", node.inputs)


@rule("RELU_0_TO_1", version=1)
def relu_0_to_1(node: Node) -> list:
    return node.op("Clip", [node.inputs[0], node.scalar(0.0), node.scalar(1.0)])


@rule("BITWISE_XOR", version=1, inputs=2)
def bitwise_xor(node: Node) -> list:
    return node.op("BitwiseXor", node.inputs[:2])


@rule("RIGHT_SHIFT", version=1, inputs=2)
def right_shift(node: Node) -> list:
    """Arithmetic for signed types, logical for unsigned (BitShift's meaning on each); LiteRT
    clamps the shift to [0, bits - 1] first (a negative shift is none, a long one the sign fill)."""
    x, shift = node.inputs[:2]
    dtype = DTYPES.get(node.tensors[1].get("type"))
    if dtype is None or dtype.numpy.kind not in "iu":
        raise node.unsupported(f"shift of type {dtype} is not an integer type")
    low = node.imp.const(np.zeros((), dtype.numpy))
    high = node.imp.const(np.asarray(dtype.numpy.itemsize * 8 - 1, dtype.numpy))
    shift = node.one("Min", [node.one("Max", [shift, low]), high])
    return node.op("BitShift", [x, shift], {"direction": "RIGHT"})


@rule("ATAN2", version=1, inputs=2)
def atan2(node: Node) -> list:
    """atan2(y, x) from Atan(y / x), corrected by ±π where x is negative (or -0), the side taken
    from y's sign (1/v < 0 tells -0 from +0). Two zeros: y itself, or ±π for a negative x;
    two infinities: their signs stand in for them (±π/4, ±3π/4). A NaN stays NaN."""
    y, x = node.inputs[:2]
    dtype = y.type.dtype if y.type is not None else DataType.FLOAT

    def c(v: float) -> Value:
        return node.imp.const(np.asarray(v, dtype.numpy))

    both_inf = node.one("And", [node.one("IsInf", [y]), node.one("IsInf", [x])])
    y = node.one("Where", [both_inf, node.one("Sign", [y]), y])
    x = node.one("Where", [both_inf, node.one("Sign", [x]), x])

    def negative(v: Value) -> Value:  # below zero, or -0
        below = node.one("Less", [v, c(0.0)])
        return node.one("Or", [below, node.one("Less", [node.one("Reciprocal", [v]), c(0.0)])])

    x_negative, y_negative = negative(x), negative(y)
    half_turn = node.one("Where", [y_negative, c(-np.pi), c(np.pi)])
    base = node.one("Atan", [node.one("Div", [y, x])])
    base = node.one("Where", [x_negative, node.one("Add", [base, half_turn]), base])
    y_zero = node.one("And", [node.one("Equal", [y, c(0.0)]), node.one("Not", [node.one("IsNaN", [x])])])
    return node.op("Where", [y_zero, node.one("Where", [x_negative, half_turn, y]), base])


@rule("REDUCE_ANY", "REDUCE_ALL", version=1, inputs=2)
def reduce_bool(node: Node) -> list:
    """any: a count of the true elements above 0; all: no false element. Counting keeps an empty
    reduction right (any false, all true), and an empty axis list reduces nothing."""
    axes = node.const(1).astype(np.int64).reshape(-1)
    x = node.inputs[0] if node.name == "REDUCE_ANY" else node.one("Not", node.inputs[:1])
    attrs = {"keepdims": int(bool(node.opt("keep_dims")))}
    if axes.size == 0:
        attrs["noop_with_empty_axes"] = 1
    count = node.one(
        "ReduceSum", [node.one("Cast", [x], {"to": int(DataType.INT64)}), node.ints(axes)], attrs
    )
    if node.name == "REDUCE_ANY":
        return node.op("Greater", [count, node.ints(0)])
    return node.op("Equal", [count, node.ints(0)])
