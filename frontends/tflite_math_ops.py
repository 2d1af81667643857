"""TFLite builtin math, bitwise and boolean-reduction operators as IR ops: ROUND, ATAN2, ADD_N,
RELU_0_TO_1, RIGHT_SHIFT, BITWISE_XOR, REDUCE_ANY, REDUCE_ALL, BITCAST, FAKE_QUANT, and the
elementwise StableHLO operators LiteRT runs."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import DTYPES, Node, _out_dtype, rule


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


@rule("BITCAST", version=1)
def bitcast(node: Node) -> list:
    """The same bits as the output's type; a cast between types of different widths (which
    changes the shape) is refused."""
    src, dst = DTYPES.get(node.tensors[0].get("type")), _out_dtype(node)
    if src is None or src.numpy.itemsize != dst.numpy.itemsize:
        raise node.unsupported(f"a bitcast from {src} to {dst} changes the element width")
    return node.op("BitCast", node.inputs[:1], {"to": int(dst)})


def _nudged(lo: float, hi: float, q_lo: int, q_hi: int) -> tuple[np.float32, np.float32, np.float32]:
    """TFLite's Nudge, in float32: the scale, and min and max moved so that 0 is a step."""
    f32 = np.float32
    scale = f32(f32(hi) - f32(lo)) / f32(q_hi - q_lo)
    zero_from_min = f32(q_lo) - f32(lo) / scale
    zero = q_lo if zero_from_min < q_lo else q_hi if zero_from_min > q_hi else _round_half_away(zero_from_min)
    return scale, f32(f32(q_lo - zero) * scale), f32(f32(q_hi - zero) * scale)


def _round_half_away(v: np.float32) -> float:
    return float(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)))


@rule("FAKE_QUANT", version=2)
def fake_quant(node: Node) -> list:
    """x clamped to the nudged [min, max], snapped to the nearest of its 2^bits steps (halves
    away from zero, as TfLiteRound: the shifted value is not negative, so floor, plus one where
    the fraction is at least ½), as LiteRT computes it in float32."""
    if node.opt("narrow_range"):  # LiteRT refuses it too: it is meant for weights
        raise node.unsupported("narrow_range is not supported")
    bits = int(node.opt("num_bits"))
    lo, hi = float(node.opt("min")), float(node.opt("max"))
    if not 2 <= bits <= 16 or not lo < hi:
        raise node.fail(f"num_bits {bits}, min {lo} and max {hi} do not make a quantization")
    scale, low, high = _nudged(lo, hi, 0, (1 << bits) - 1)
    x = node.one("Clip", [node.inputs[0], node.scalar(low), node.scalar(high)])
    steps = node.one("Mul", [node.one("Sub", [x, node.scalar(low)]), node.scalar(np.float32(1) / scale)])
    whole = node.one("Floor", [steps])
    up = node.one("GreaterOrEqual", [node.one("Sub", [steps, whole]), node.scalar(0.5)])
    rounded = node.one("Add", [whole, node.one("Cast", [up], {"to": int(DataType.FLOAT)})])
    return node.op("Add", [node.one("Mul", [rounded, node.scalar(scale)]), node.scalar(low)])


# StableHLO's elementwise operators that LiteRT runs, on operands of one shape
STABLEHLO_BINARY = {
    "STABLEHLO_ADD": "Add",
    "STABLEHLO_MULTIPLY": "Mul",
    "STABLEHLO_MAXIMUM": "Max",
    "STABLEHLO_MINIMUM": "Min",
}


@rule(*STABLEHLO_BINARY, version=1, inputs=2)
def stablehlo_binary(node: Node) -> list:
    return node.op(STABLEHLO_BINARY[node.name], node.inputs[:2])


@rule("STABLEHLO_AND", version=1, inputs=2)
def stablehlo_and(node: Node) -> list:
    logical = node.tensors[0].get("type") == TflType.BOOL
    return node.op("And" if logical else "BitwiseAnd", node.inputs[:2])
