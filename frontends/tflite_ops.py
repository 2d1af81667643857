"""TFLite builtin operators as IR ops: convolution, pooling, dense, elementwise, math and logic."""

from __future__ import annotations

import numpy as np

from offload.ir import (
    DataType,
    Value,
)
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import (
    DTYPES,
    INT64_MIN,
    Node,
    _cast_to_output,
    _int64,
    _out_dtype,
    in_nchw,
    permuted,
    rule,
    same_pads,
    spatial_attrs,
)

# ---------------------------------------------------------------------------------------------
# Rules: convolution, pooling, dense.


@rule("CONV_2D", version=8, inputs=2)
def conv_2d(node: Node) -> list:
    _, kh, kw, i = node.shape(1, 4)
    c = node.dims(0, 4)[3]
    dilation = (node.opt("dilation_h_factor"), node.opt("dilation_w_factor"))
    attrs = spatial_attrs(node, (kh, kw), dilation)
    if not isinstance(c, int) or i < 1 or c % i:
        raise node.fail(f"input channels {c} are not a multiple of the filter's {i}")
    attrs.update(kernel_shape=[kh, kw], dilations=list(dilation), group=c // i)
    w = permuted(node, 1, [0, 3, 1, 2])  # OHWI → OIHW
    y = in_nchw(node, "Conv", [node.inputs[0], w, _optional(node, 2)], attrs)
    return [node.activation(y)]


@rule("DEPTHWISE_CONV_2D", version=7, inputs=2)
def depthwise_conv_2d(node: Node) -> list:
    _, kh, kw, cm = node.shape(1, 4)  # filter [1, H, W, C·M]; output channel c·M + m
    c = node.dims(0, 4)[3]
    dilation = (node.opt("dilation_h_factor"), node.opt("dilation_w_factor"))
    attrs = spatial_attrs(node, (kh, kw), dilation)
    if not isinstance(c, int) or c < 1 or cm % c:
        raise node.fail(f"filter channels {cm} are not a multiple of the input's {c}")
    attrs.update(kernel_shape=[kh, kw], dilations=list(dilation), group=c)
    w = permuted(node, 1, [3, 0, 1, 2])  # [1, H, W, C·M] → [C·M, 1, H, W]: group c has c·M … c·M + M - 1
    y = in_nchw(node, "Conv", [node.inputs[0], w, _optional(node, 2)], attrs)
    return [node.activation(y)]


@rule("AVERAGE_POOL_2D", "MAX_POOL_2D", version=3)
def pool_2d(node: Node) -> list:
    kernel = (node.opt("filter_height"), node.opt("filter_width"))
    attrs = spatial_attrs(node, kernel, (1, 1))
    attrs["kernel_shape"] = list(kernel)
    if node.name == "AVERAGE_POOL_2D":
        attrs["count_include_pad"] = 0  # TFLite averages the elements inside the input only
        y = in_nchw(node, "AveragePool", [node.inputs[0]], attrs)
    else:
        y = in_nchw(node, "MaxPool", [node.inputs[0]], attrs)
    return [node.activation(y)]


@rule("FULLY_CONNECTED", version=12, inputs=2)
def fully_connected(node: Node) -> list:
    if node.opt("weights_format") != 0:
        raise node.unsupported(f"weights format {node.opt('weights_format')} (only DEFAULT)")
    _, k = node.shape(1, 2)
    x, bias = node.inputs[0], _optional(node, 2)
    if node.opt("keep_num_dims"):
        y = node.one("MatMul", [x, permuted(node, 1, [1, 0])])
        y = node.one("Add", [y, bias]) if bias is not None else y
    else:
        if len(node.shape(0)) != 2:
            x = node.one("Reshape", [x, node.ints([-1, k])])
        y = node.one("Gemm", [x, node.inputs[1], bias], {"transB": 1})
    return [node.activation(y)]


def _optional(node: Node, i: int) -> Value | None:
    return node.inputs[i] if i < len(node.inputs) else None


# ---------------------------------------------------------------------------------------------
# Rules: elementwise.

BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div"}


@rule("ADD", "SUB", "MUL", "DIV", version=5, inputs=2)
def binary(node: Node) -> list:
    y = node.one(BINARY[node.name], node.inputs[:2])
    return [node.activation(y) if node.options is not None else y]


@rule("MAXIMUM", "MINIMUM", version=4, inputs=2)
def extremum(node: Node) -> list:
    return node.op("Max" if node.name == "MAXIMUM" else "Min", node.inputs[:2])


@rule("SQUARED_DIFFERENCE", version=2, inputs=2)
def squared_difference(node: Node) -> list:
    d = node.one("Sub", node.inputs[:2])
    return node.op("Mul", [d, d])


UNARY = {
    "ABS": "Abs",
    "NEG": "Neg",
    "EXP": "Exp",
    "LOG": "Log",
    "SQRT": "Sqrt",
    "RELU": "Relu",
    "LOGISTIC": "Sigmoid",
    "TANH": "Tanh",
    "HARD_SWISH": "HardSwish",  # x·relu6(x + 3)/6 = ONNX's x·max(0, min(1, x/6 + 1/2))
    "ELU": "Elu",  # alpha 1
    "FLOOR": "Floor",
    "CEIL": "Ceil",
    "SIN": "Sin",
    "COS": "Cos",
    "SIGN": "Sign",
}


@rule(*UNARY, version=1)
def unary(node: Node) -> list:
    return node.op(UNARY[node.name], node.inputs[:1])


@rule("RSQRT", version=2)
def rsqrt(node: Node) -> list:
    return node.op("Reciprocal", [node.one("Sqrt", node.inputs[:1])])


@rule("RELU6", "RELU_N1_TO_1", version=2)
def clipped_relu(node: Node) -> list:
    return [node.activation(node.inputs[0], Act.RELU6 if node.name == "RELU6" else Act.RELU_N1_TO_1)]


@rule("LEAKY_RELU", version=2)
def leaky_relu(node: Node) -> list:
    return node.op("LeakyRelu", node.inputs[:1], {"alpha": float(node.opt("alpha"))})


@rule("PRELU", version=1, inputs=2)
def prelu(node: Node) -> list:
    """x where x >= 0, else alpha·x, alpha broadcast against x (LiteRT broadcasts both ways; a
    converter writes alpha as [C] or [1, 1, C] beside NHWC x, which ONNX PRelu's one-way
    broadcast takes)."""
    x, alpha = node.inputs[:2]
    # the shapes the file records: a value's type is inferred only after the whole graph is read
    xs, alphas = node.dims(0), node.dims(1)
    one_way = len(alphas) <= len(xs) and all(a == 1 or a == d for a, d in zip(reversed(alphas), reversed(xs)))
    if one_way:
        return node.op("PRelu", [x, alpha])
    negative = node.one("Less", [x, node.scalar(0.0)])
    return node.op("Where", [negative, node.one("Mul", [x, alpha]), x])


@rule("SOFTMAX", version=3)
def softmax(node: Node) -> list:
    x, beta = node.inputs[0], float(node.opt("beta"))
    if beta != 1.0:
        x = node.one("Mul", [x, node.scalar(beta)])
    return node.op("Softmax", [x], {"axis": -1})


@rule("LOG_SOFTMAX", version=2)
def log_softmax(node: Node) -> list:
    return node.op("LogSoftmax", node.inputs[:1], {"axis": -1})


# ---------------------------------------------------------------------------------------------
# Rules: batched matrix product, quantization.


@rule("BATCH_MATMUL", version=4, inputs=2)
def batch_matmul(node: Node) -> list:
    x, y = node.inputs[:2]
    for i, flag in ((0, "adj_x"), (1, "adj_y")):
        if node.opt(flag):
            rank = len(node.shape(i))
            if rank < 2:
                raise node.fail(f"{flag} on input {i} of rank {rank}")
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            if i == 0:
                x = node.one("Transpose", [x], {"perm": perm})
            else:
                y = node.one("Transpose", [y], {"perm": perm})
    return node.op("MatMul", [x, y])


@rule("DEQUANTIZE", version=6)
def dequantize(node: Node) -> list:
    """float16 weights: a Cast; int8/uint8/int16 tensors: their float values (a constant
    dequantized at import, DequantizeLinear for an activation)."""
    x = node.inputs[0]
    if node.tensors[0].get("type") == TflType.FLOAT16:
        return node.op("Cast", [x], {"to": int(DataType.FLOAT)})
    y = node.imp.dequantized(x)
    if y is x:
        raise node.unsupported(f"input of type {x.type} has no scale to dequantize with")
    return [
        y
        if y.producer is not None and y.producer.op_type == "DequantizeLinear"
        else node.one("Identity", [y])
    ]


@rule("QUANTIZE", version=3)
def quantize(node: Node) -> list:
    """float → int: QuantizeLinear; int → int (a change of scale): DequantizeLinear first."""
    x = node.imp.dequantized(node.inputs[0])
    y = node.imp.quantized(x, node.outputs[0], f"operator {node.index} output 0")
    if y is x:
        raise node.unsupported("its output has no scale to quantize with")
    return [y]


# ---------------------------------------------------------------------------------------------
# Rules: transposed convolution, resizing, depth ↔ space, normalisation, padding modes.


@rule("TRANSPOSE_CONV", version=5, inputs=3)
def transpose_conv(node: Node) -> list:
    """Inputs (output shape, OHWI filter, NHWC input, optional bias)."""
    out_shape = node.const(0).astype(np.int64).reshape(-1)
    if len(out_shape) != 4:
        raise node.fail(f"output shape {out_shape.tolist()} is not 4 dims")
    strides = [node.opt("stride_h"), node.opt("stride_w")]
    y = transposed_conv(node, 2, 1, _optional(node, 3), out_shape[1:3], strides, node.opt("padding"))
    return [node.activation(y) if "fused_activation_function" in node.options.fields else y]


def transposed_conv(node: Node, x: int, w: int, bias, out_hw, strides: list, padding: int) -> Value:
    """NHWC input ``x`` through the OHWI filter input ``w`` to an output of spatial size
    ``out_hw``. TFLite places input pixel i at output i·stride - before, where ``before`` is the
    SAME padding of a conv from the output shape back to the input; ONNX ConvTranspose does the
    same with pads [before, after], after whatever the output shape leaves (output_padding when
    it asks for more)."""
    _, kh, kw, _ = node.shape(w, 4)
    _, h, wd, _ = node.dims(x, 4)
    if min(strides) < 1 or not isinstance(h, int) or not isinstance(wd, int):
        raise node.fail(f"strides {strides} or input {h}×{wd} is not usable")
    if padding not in (Padding.SAME, Padding.VALID):
        raise node.fail(f"padding {padding} is neither SAME nor VALID")
    begin, end, extra = [], [], []
    for size, k, s, out in ((h, kh, strides[0], out_hw[0]), (wd, kw, strides[1], out_hw[1])):
        before = same_pads(int(out), k, s, 1)[0] if padding == Padding.SAME else 0
        after = s * (size - 1) + k - before - int(out)
        begin.append(before)
        end.append(max(after, 0))
        extra.append(max(-after, 0))
    attrs = {"strides": list(strides), "kernel_shape": [kh, kw], "pads": begin + end}
    if any(extra):
        attrs["output_padding"] = extra
    w_ = permuted(node, w, [3, 0, 1, 2])  # OHWI → IOHW
    return in_nchw(node, "ConvTranspose", [node.inputs[x], w_, bias], attrs)


@rule("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", version=4, inputs=2)
def resize(node: Node) -> list:
    """ONNX Resize on the H and W axes of NHWC. TFLite's coordinate rules map to ONNX modes:
    bilinear samples out·scale (asymmetric), or (out + ½)·scale - ½ clamped at the edges
    (half_pixel), or out·(in - 1)/(out - 1) (align_corners); nearest takes
    floor(out·scale), floor((out + ½)·scale) (tf_half_pixel_for_nn) or round-half-up of the
    align_corners coordinate."""
    align, half = bool(node.opt("align_corners")), bool(node.opt("half_pixel_centers"))
    if align and half:
        raise node.fail("align_corners and half_pixel_centers are both set")
    if node.name == "RESIZE_BILINEAR":
        mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
        attrs = {"mode": "linear", "coordinate_transformation_mode": mode}
    else:
        mode = "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
        rounding = "round_prefer_ceil" if align else "floor"
        attrs = {"mode": "nearest", "coordinate_transformation_mode": mode, "nearest_mode": rounding}
    attrs["axes"] = [1, 2]
    return node.op("Resize", [node.inputs[0], None, None, _int64(node, 1)], attrs)


@rule("DEPTH_TO_SPACE", "SPACE_TO_DEPTH", version=2)
def depth_space(node: Node) -> list:
    # TFLite orders the moved channels (row offset, column offset, channel): ONNX's DCR order.
    size = int(node.opt("block_size"))
    if size < 1:
        raise node.fail(f"block size {size} is not positive")
    if node.name == "DEPTH_TO_SPACE":
        return [in_nchw(node, "DepthToSpace", node.inputs[:1], {"blocksize": size, "mode": "DCR"})]
    return [in_nchw(node, "SpaceToDepth", node.inputs[:1], {"blocksize": size})]


L2_EPSILON = 1e-6  # TFLite divides by max(‖x‖, 1e-6)


@rule("L2_NORMALIZATION", version=2)
def l2_normalization(node: Node) -> list:
    x = node.inputs[0]
    total = node.one("ReduceSum", [node.one("Mul", [x, x]), node.ints([-1])], {"keepdims": 1})
    norm = node.one("Max", [node.one("Sqrt", [total]), node.scalar(L2_EPSILON)])
    return [node.activation(node.one("Div", [x, norm]))]


@rule("MIRROR_PAD", version=3, inputs=2)
def mirror_pad(node: Node) -> list:
    """REFLECT is ONNX Pad's reflect mode; SYMMETRIC (the border repeated) has no ONNX mode and
    is built axis by axis: the reversed first ``before`` and last ``after`` slices around x."""
    paddings = node.const(1).astype(np.int64).reshape(-1, 2)
    x = node.inputs[0]
    if node.opt("mode") == 0:
        return node.op(
            "Pad", [x, node.ints(np.concatenate([paddings[:, 0], paddings[:, 1]]))], {"mode": "reflect"}
        )
    if node.opt("mode") != 1:
        raise node.fail(f"mirror pad mode {node.opt('mode')} is neither REFLECT nor SYMMETRIC")
    shape = node.shape(0)
    if len(shape) != len(paddings):
        raise node.fail(f"{len(paddings)} paddings for an input of rank {len(shape)}")
    for axis, (before, after) in enumerate(paddings.tolist()):
        if before < 0 or after < 0 or max(before, after) > shape[axis]:
            raise node.fail(f"padding ({before}, {after}) of axis {axis} exceeds its size {shape[axis]}")
        if not before and not after:
            continue
        parts = [x]
        axes = node.ints([axis])
        step = node.ints([-1])
        if before:
            edge = node.ints([before - 1])
            parts.insert(0, node.one("Slice", [x, edge, node.ints([INT64_MIN]), axes, step]))
        if after:
            start, stop = node.ints([shape[axis] - 1]), node.ints([shape[axis] - 1 - after])
            parts.append(node.one("Slice", [x, start, stop, axes, step]))
        x = node.one("Concat", parts, {"axis": axis})
    return [node.one("Identity", [x]) if x is node.inputs[0] else x]


@rule("GELU", version=2)
def gelu(node: Node) -> list:
    approximate = "tanh" if node.options is not None and node.opt("approximate") else "none"
    return node.op("Gelu", node.inputs[:1], {"approximate": approximate})


# ---------------------------------------------------------------------------------------------
# Rules: math, comparisons, logic, selection, indices.

COMPARE = {
    "LESS": "Less",
    "LESS_EQUAL": "LessOrEqual",
    "GREATER": "Greater",
    "GREATER_EQUAL": "GreaterOrEqual",
    "EQUAL": "Equal",
    "LOGICAL_AND": "And",
    "LOGICAL_OR": "Or",
    "POW": "Pow",
}


@rule(*COMPARE, version=4, inputs=2)
def compare(node: Node) -> list:
    return node.op(COMPARE[node.name], node.inputs[:2])


@rule("NOT_EQUAL", version=3, inputs=2)
def not_equal(node: Node) -> list:
    return node.op("Not", [node.one("Equal", node.inputs[:2])])


@rule("LOGICAL_NOT", version=1)
def logical_not(node: Node) -> list:
    return node.op("Not", node.inputs[:1])


@rule("SQUARE", version=1)
def square(node: Node) -> list:
    return node.op("Mul", [node.inputs[0], node.inputs[0]])


def _is_float(node: Node, i: int) -> bool:
    return DTYPES.get(node.tensors[i].get("type")) in (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE)


@rule("FLOOR_DIV", version=3, inputs=2)
def floor_div(node: Node) -> list:
    a, b = node.inputs[:2]
    if _is_float(node, 0):
        return node.op("Floor", [node.one("Div", [a, b])])
    # integers: subtract the floored remainder (the divisor's sign, ONNX Mod fmod=0) first,
    # then the division is exact
    rest = node.one("Mod", [a, b], {"fmod": 0})
    return node.op("Div", [node.one("Sub", [a, rest]), b])


@rule("FLOOR_MOD", version=2, inputs=2)
def floor_mod(node: Node) -> list:
    a, b = node.inputs[:2]
    if not _is_float(node, 0):
        return node.op("Mod", [a, b], {"fmod": 0})
    # TFLite: m = fmod(a, b), plus b when m is nonzero and its sign differs from b's
    m = node.one("Mod", [a, b], {"fmod": 1})
    zero = node.scalar(0.0)
    differ = node.one("Xor", [node.one("Less", [m, zero]), node.one("Less", [b, zero])])
    fix = node.one("And", [differ, node.one("Not", [node.one("Equal", [m, zero])])])
    return node.op("Where", [fix, node.one("Add", [m, b]), m])


@rule("SELECT", "SELECT_V2", version=2, inputs=3)
def select(node: Node) -> list:
    cond, x, y = node.inputs[:3]
    rank_c, rank_x = len(node.shape(0)), len(node.shape(1))
    if node.name == "SELECT" and rank_c == 1 and rank_x > 1:  # SELECT picks whole rows by a vector
        cond = node.one("Reshape", [cond, node.ints([-1] + [1] * (rank_x - 1))])
    return node.op("Where", [cond, x, y])


@rule("CAST", version=6)
def cast(node: Node) -> list:
    return node.op("Cast", node.inputs[:1], {"to": int(_out_dtype(node))})


@rule("ARG_MAX", "ARG_MIN", version=3, inputs=2)
def arg_extremum(node: Node) -> list:
    # both take the first of equal values, as ONNX's select_last_index = 0 does
    op = "ArgMax" if node.name == "ARG_MAX" else "ArgMin"
    y = node.one(op, node.inputs[:1], {"axis": node.axis(1), "keepdims": 0})
    return [_cast_to_output(node, y)]


@rule("TOPK_V2", version=3, inputs=2)
def top_k(node: Node) -> list:
    k = node.one("Reshape", [_int64(node, 1), node.ints([1])])
    values, indices = node.op("TopK", [node.inputs[0], k], {"axis": -1, "largest": 1, "sorted": 1}, 2)
    return [values, _cast_to_output(node, indices, 1)]


@rule("GATHER_ND", version=4, inputs=2)
def gather_nd(node: Node) -> list:
    return node.op("GatherND", [node.inputs[0], _int64(node, 1)])


@rule("CUMSUM", version=1, inputs=2)
def cumsum(node: Node) -> list:
    attrs = {"exclusive": int(bool(node.opt("exclusive"))), "reverse": int(bool(node.opt("reverse")))}
    return node.op("CumSum", [node.inputs[0], _int64(node, 1)], attrs)
