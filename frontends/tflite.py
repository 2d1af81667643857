"""TFLite import: a .tflite flatbuffer → ir.Program whose ops carry ONNX semantics.

The main subgraph becomes the function ``forward``; its inputs and outputs are named by their
tensors. A tensor with a ``shape_signature`` of -1 gets a symbolic dimension; a tensor with
data in its buffer (inside the flatbuffer, or after it through ``offset``/``size``) becomes a
block constant read in place from the file's bytes.

Each builtin operator is translated by one rule of ``RULES`` (``@rule("CONV_2D")``). Layouts are
made explicit: TFLite's activations are NHWC and its filters OHWI, ONNX's Conv and pools are
NCHW/OIHW, so a layout-sensitive op is wrapped in Transposes (NHWC → NCHW before, back after)
that the transpose-cancelling passes remove between neighbours; constant filters are permuted
once here. A fused activation becomes its own op after the one that carried it. SAME padding
is written as explicit pads computed the way TFLite does: the output is ceil(in / stride), the
total padding max((out - 1)·stride + (k - 1)·dilation + 1 - in, 0), its smaller half before and
the extra element after. Any operator without a rule is an ``UnsupportedOpError`` naming it and
its index; docs/tflite.md lists the rules. Subgraph calls (WHILE, IF: ``tflite_control``), the LSTM
(``tflite_lstm``), sparse constants and DENSIFY (``tflite_sparse``), slices with computed bounds
(``tflite_slices``) and custom operators (``tflite_custom``) have modules of their own that add
their rules to ``RULES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError, OffloadError, UnsupportedOpError, VerificationError
from offload.ir import (
    Block,
    DataType,
    Function,
    Namer,
    Operation,
    Program,
    QuantParams,
    TensorType,
    Value,
    infer_types,
    verify,
)
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from . import tflite_int8
from .tflite_quant import (
    ACTIVATION_DTYPES,
    HYBRID_OPS,
    QUANTIZED_DTYPES,
    dequantize_array,
    hybrid_input,
    quant_inputs,
)
from .tflite_reader import Buffer, Table

MAX_RANK = 64
MAX_CALL_DEPTH = 16  # subgraphs calling subgraphs (WHILE, IF): deeper is refused
MAX_TRANSLATIONS_PER_SUBGRAPH = 8  # subgraph translations in all, per subgraph of the file
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min

_OPERATOR_NAMES = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
# Below this code, old files store the operator in deprecated_builtin_code only.
_PLACEHOLDER_FOR_GREATER_OP_CODES = BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES

DTYPES = {
    TflType.FLOAT32: DataType.FLOAT,
    TflType.FLOAT16: DataType.FLOAT16,
    TflType.FLOAT64: DataType.DOUBLE,
    TflType.BFLOAT16: DataType.BFLOAT16,
    TflType.INT8: DataType.INT8,
    TflType.INT16: DataType.INT16,
    TflType.INT32: DataType.INT32,
    TflType.INT64: DataType.INT64,
    TflType.UINT8: DataType.UINT8,
    TflType.UINT16: DataType.UINT16,
    TflType.UINT32: DataType.UINT32,
    TflType.UINT64: DataType.UINT64,
    TflType.BOOL: DataType.BOOL,
    TflType.COMPLEX64: DataType.COMPLEX64,
    TflType.COMPLEX128: DataType.COMPLEX128,
}
_TYPE_NAMES = {v: k for k, v in vars(TflType).items() if not k.startswith("_")}


# ---------------------------------------------------------------------------------------------
# One operator being translated: its tensors, options, and the builder it adds ops through.


@dataclass
class Node:
    """The operator being translated, as a rule sees it."""

    imp: _Importer
    index: int
    name: str  # the builtin operator's name, e.g. "CONV_2D"
    version: int
    inputs: list  # Value, or None for an omitted optional input (-1)
    tensors: list  # the input tensors (Table), None where omitted
    outputs: list  # the output tensors (Table)
    options: Table | None
    operator: Table | None = None  # the Operator table itself (custom_options, for a custom op)

    @property
    def custom_options(self) -> bytes:
        """A custom operator's options as the file stores them (a flexbuffer, usually)."""
        raw = self.operator.get("custom_options") if self.operator is not None else None
        return b"" if raw is None else raw.tobytes()

    def opt(self, field: str):
        """An option's value, read from the operator's options table."""
        if self.options is None:
            raise self.fail(f"has no options table (needs '{field}')")
        if field not in self.options.fields:
            raise self.fail(f"its options are a {self.options.name}, which has no '{field}'")
        return self.options.get(field)

    def fail(self, what: str) -> ModelFormatError:
        return self.imp.fail(f"operator {self.index} ({self.name}): {what}")

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.imp.origin}: operator {self.index} ({self.name}): {what}")

    def _tensor(self, i: int, output: bool, rank: int | None) -> Table:
        tensors = self.outputs if output else self.tensors
        t = tensors[i] if i < len(tensors) else None
        if t is None:
            raise self.fail(f"has no {'output' if output else 'input'} {i}")
        if rank is not None and len(t.items("shape")) != rank:
            raise self.fail(
                f"{'output' if output else 'input'} {i} has rank {len(t.items('shape'))}, not {rank}"
            )
        return t

    def dims(self, i: int, rank: int | None = None) -> tuple:
        """Input tensor ``i``'s dimensions as the file records them, unknown ones symbolic."""
        t = self._tensor(i, False, rank)
        return self.imp.tensor_type(t, f"operator {self.index} input {i}").shape

    def shape(self, i: int, rank: int | None = None, *, output: bool = False) -> tuple:
        """The static shape the file records for input (or output) tensor ``i``."""
        return tuple(int(d) for d in self._tensor(i, output, rank).items("shape"))

    def axis(self, i: int) -> int:
        """Input ``i``, a constant holding one axis."""
        value = self.const(i).reshape(-1)
        if value.size != 1:
            raise self.fail(f"input {i} holds {value.size} values, not one axis")
        return int(value[0])

    def const(self, i: int) -> np.ndarray:
        """Input ``i``'s constant value; an operator argument TFLite allows to vary is refused."""
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None or v.const_value is None:
            raise self.unsupported(f"input {i} must be a constant tensor here")
        return v.const_value

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1, domain: str = "") -> list[Value]:
        return self.imp.op(op_type, inputs, attrs, num_outputs, domain)

    def one(self, op_type: str, inputs, attrs=None) -> Value:
        return self.op(op_type, inputs, attrs)[0]

    def ints(self, values) -> Value:
        return self.imp.const(np.asarray(values, dtype=np.int64))

    def scalar(self, value: float) -> Value:
        return self.imp.const(np.asarray(value, dtype=np.float32))

    def activation(self, x: Value, code=None) -> Value:
        """``x`` followed by the operator's fused activation function."""
        code = self.opt("fused_activation_function") if code is None else code
        if code == Act.NONE:
            return x
        if code == Act.RELU:
            return self.one("Relu", [x])
        if code == Act.RELU6:
            return self.one("Clip", [x, self.scalar(0.0), self.scalar(6.0)])
        if code == Act.RELU_N1_TO_1:
            return self.one("Clip", [x, self.scalar(-1.0), self.scalar(1.0)])
        if code == Act.TANH:
            return self.one("Tanh", [x])
        raise self.unsupported(f"fused activation function {code} is not supported")


Rule = Callable[[Node], list]
RULES: dict[str, Rule] = {}
VERSIONS: dict[str, int] = {}  # the newest operator version a rule was written for (docs/tflite.md)


ARITY: dict[str, int] = {}  # how many leading inputs must be present


def rule(*names: str, version: int = 1, inputs: int = 1):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
            VERSIONS[name] = version
            ARITY[name] = inputs
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# Layout helpers.

NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]


def same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding of one spatial axis: (before, after), the odd element after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def spatial_attrs(node: Node, kernel: tuple[int, int], dilation: tuple[int, int]) -> dict:
    """strides and pads (or auto_pad when H or W is unknown) of a 2-D window op on NHWC input 0."""
    strides = [node.opt("stride_h"), node.opt("stride_w")]
    if min(strides) < 1 or min(kernel) < 1 or min(dilation) < 1:
        raise node.fail(f"strides {strides}, window {kernel} and dilations {dilation} must be positive")
    attrs = {"strides": strides}
    padding = node.opt("padding")
    if padding == Padding.VALID:
        attrs["pads"] = [0, 0, 0, 0]
        return attrs
    if padding != Padding.SAME:
        raise node.fail(f"padding {padding} is neither SAME nor VALID")
    shape = node.dims(0)
    if len(shape) != 4:
        raise node.fail(f"input of shape {shape} is not NHWC")
    if isinstance(shape[1], int) and isinstance(shape[2], int):
        h = same_pads(shape[1], kernel[0], strides[0], dilation[0])
        w = same_pads(shape[2], kernel[1], strides[1], dilation[1])
        attrs["pads"] = [h[0], w[0], h[1], w[1]]
    else:
        attrs["auto_pad"] = "SAME_UPPER"  # ONNX's SAME_UPPER also puts the odd element after
    return attrs


def in_nchw(node: Node, op_type: str, inputs: list, attrs: dict) -> Value:
    """``op_type`` on NCHW, between Transposes from and back to the NHWC of its input 0."""
    x = node.one("Transpose", [inputs[0]], {"perm": NHWC_TO_NCHW})
    y = node.one(op_type, [x, *inputs[1:]], attrs)
    return node.one("Transpose", [y], {"perm": NCHW_TO_NHWC})


def permuted(node: Node, i: int, perm: list[int]) -> Value:
    """Input ``i`` permuted: a new constant when it is one, a Transpose op otherwise."""
    v = node.inputs[i]
    if v.const_value is not None:
        return node.imp.const(np.ascontiguousarray(np.transpose(v.const_value, perm)))
    return node.one("Transpose", [v], {"perm": perm})


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


@rule("RESHAPE", version=1)
def reshape(node: Node) -> list:
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        shape = node.inputs[1]
        if shape.const_value is not None:
            dims = shape.const_value.reshape(-1)
            shape = node.ints(dims)
        else:
            dims = None
            shape = node.one("Cast", [shape], {"to": int(DataType.INT64)})
    elif node.options is not None and node.opt("new_shape") is not None:
        dims = node.opt("new_shape")
        shape = node.ints(dims)
    else:
        dims = np.asarray(node.shape(0, output=True))
        shape = node.ints(dims)
    # TFLite's 0 is a dimension of size 0; ONNX copies the input's dimension unless allowzero.
    attrs = {"allowzero": 1} if dims is not None and 0 in dims else {}
    return node.op("Reshape", [node.inputs[0], shape], attrs)


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
        from .tflite_slices import dynamic_slice  # begin or size computed (a loop body's index)

        return dynamic_slice(node)
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
        from .tflite_slices import dynamic_strided_slice  # begin or end computed

        return dynamic_strided_slice(node)
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


def _int64(node: Node, i: int) -> Value:
    """Input ``i`` (an int32 or int64 shape, size or axis tensor) as int64."""
    v = node.inputs[i]
    if v.const_value is not None:
        return node.ints(v.const_value.astype(np.int64))
    return node.one("Cast", [v], {"to": int(DataType.INT64)})


def _out_dtype(node: Node, i: int = 0) -> DataType:
    code = node._tensor(i, True, None).get("type")
    if code not in DTYPES:
        raise node.unsupported(f"output type {_TYPE_NAMES.get(code, code)} is not supported")
    return DTYPES[code]


def _cast_to_output(node: Node, x: Value, i: int = 0) -> Value:
    """``x`` (an int64 index result) cast to the type the file gives output ``i``."""
    dtype = _out_dtype(node, i)
    return x if dtype == DataType.INT64 else node.one("Cast", [x], {"to": int(dtype)})


@rule("TRANSPOSE_CONV", version=5, inputs=3)
def transpose_conv(node: Node) -> list:
    """Inputs (output shape, OHWI filter, NHWC input, optional bias). TFLite places input pixel i
    at output i·stride - before, where ``before`` is the SAME padding of a conv from the output
    shape back to the input; ONNX ConvTranspose does the same with pads [before, after], after
    whatever the output shape leaves (output_padding when it asks for more)."""
    out_shape = node.const(0).astype(np.int64).reshape(-1)
    _, kh, kw, _ = node.shape(1, 4)
    _, h, w, _ = node.dims(2, 4)
    strides = [node.opt("stride_h"), node.opt("stride_w")]
    if len(out_shape) != 4 or min(strides) < 1 or not isinstance(h, int) or not isinstance(w, int):
        raise node.fail(
            f"output shape {out_shape.tolist()}, strides {strides} or input {h}×{w} is not usable"
        )
    padding = node.opt("padding")
    if padding not in (Padding.SAME, Padding.VALID):
        raise node.fail(f"padding {padding} is neither SAME nor VALID")
    begin, end, extra = [], [], []
    for size, k, s, out in ((h, kh, strides[0], out_shape[1]), (w, kw, strides[1], out_shape[2])):
        before = same_pads(int(out), k, s, 1)[0] if padding == Padding.SAME else 0
        after = s * (size - 1) + k - before - int(out)
        begin.append(before)
        end.append(max(after, 0))
        extra.append(max(-after, 0))
    attrs = {"strides": strides, "kernel_shape": [kh, kw], "pads": begin + end}
    if any(extra):
        attrs["output_padding"] = extra
    w_ = permuted(node, 1, [3, 0, 1, 2])  # OHWI → IOHW
    x = node.inputs[2]
    y = in_nchw(node, "ConvTranspose", [x, w_, _optional(node, 3)], attrs)
    return [node.activation(y) if "fused_activation_function" in node.options.fields else y]


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


# ---------------------------------------------------------------------------------------------
# The importer.


class _Importer:
    def __init__(self, data: bytes, origin: str):
        self.origin = origin
        self.buf = Buffer(data, origin)
        self.model = self.buf.root()
        self.block = Block(name="main")
        self.namer = Namer()
        self.real: dict[str, Value] = {}  # a quantized value's name → its dequantized value

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: malformed tflite model: {what}")

    def const(self, array: np.ndarray) -> Value:
        return self.block.add_constant(self.namer.fresh("const"), array)

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1, domain: str = "") -> list[Value]:
        names = [self.namer.fresh(op_type) for _ in range(num_outputs)]
        op = Operation(op_type, list(inputs), attrs, domain=domain, output_names=names)
        return self.block.append(op).outputs

    # ---- quantized tensors ------------------------------------------------------------------

    def dequantized(self, v: Value) -> Value:
        """``v``'s real values: itself unless it is an integer tensor with a scale (tflite_quant)."""
        t = v.type
        if not isinstance(t, TensorType) or t.quant is None or t.dtype not in QUANTIZED_DTYPES:
            return v
        if v.name not in self.real:
            if v.const_value is not None:
                self.real[v.name] = self.const(dequantize_array(v.const_value, t.quant))
            elif t.dtype in ACTIVATION_DTYPES:
                params, attrs = quant_inputs(self, t.quant, t.dtype)
                self.real[v.name] = self.op("DequantizeLinear", [v, *params], attrs)[0]
            else:
                return v
        return self.real[v.name]

    def quantized(self, y: Value, t: Table, path: str) -> Value:
        """``y`` (real values) stored as tensor ``t`` says: QuantizeLinear when it has a scale."""
        ttype = self.tensor_type(t, path)
        if ttype.quant is None or ttype.dtype not in ACTIVATION_DTYPES:
            return y
        params, attrs = quant_inputs(self, ttype.quant, ttype.dtype)
        q = self.op("QuantizeLinear", [y, *params], attrs)[0]
        q.type = TensorType(ttype.dtype, None, ttype.quant)  # the shape is inferred later
        return q

    def quantization_around(self, node: Node) -> None:
        """Real-valued inputs for ``node``'s float rule (tflite_quant cases 1 to 3)."""
        x = node.inputs[0]
        w = node.inputs[1] if len(node.inputs) > 1 else None
        hybrid = (  # types as the file gives them: op outputs are not typed until the end
            node.name in HYBRID_OPS
            and x is not None
            and node.tensors[0].get("type") == TflType.FLOAT32
            and w is not None
            and w.const_value is not None
            and w.type.quant is not None
            and w.type.dtype == DataType.INT8
        )
        node.inputs = [None if v is None else self.dequantized(v) for v in node.inputs]
        if hybrid:
            if node.name == "FULLY_CONNECTED":
                asymmetric, axes = bool(node.opt("asymmetric_quantize_inputs")), [-1]
            else:  # per-channel filters take the asymmetric path, per-tensor ones the symmetric
                asymmetric = node.name == "DEPTHWISE_CONV_2D" or w.type.quant.scale.size > 1
                axes = [1, 2, 3]
            node.inputs[0] = hybrid_input(node, x, axes, asymmetric)

    # ---- tensors --------------------------------------------------------------------------

    def operator_codes(self) -> list[tuple[str, int]]:
        out = []
        for code in self.model.items("operator_codes"):
            builtin = max(code.get("builtin_code"), code.get("deprecated_builtin_code"))
            name = _OPERATOR_NAMES.get(builtin, f"builtin operator code {builtin}")
            if builtin == BuiltinOperator.CUSTOM:
                name = f"CUSTOM '{code.get('custom_code') or ''}'"
            out.append((name, code.get("version")))
        return out

    def tensor_type(self, t: Table, path: str) -> TensorType:
        code = t.get("type")
        dtype = DTYPES.get(code)
        if dtype is None:
            raise UnsupportedOpError(
                f"{self.origin}: {path}: tensor type {_TYPE_NAMES.get(code, code)} is not supported"
            )
        shape, signature = t.get("shape"), t.get("shape_signature")
        shape = () if shape is None else shape
        if len(shape) > MAX_RANK:
            raise self.fail(f"{path}: rank {len(shape)} exceeds {MAX_RANK}")
        if signature is not None and len(signature) == len(shape):
            shape = signature
        dims = []
        for i, d in enumerate(shape):
            if d == -1:
                dims.append(f"{t.get('name') or path}:{i}")
            elif d < 0:
                raise self.fail(f"{path}: negative dimension {d}")
            else:
                dims.append(int(d))
        return TensorType(dtype, tuple(dims), self.quantization(t, dtype, path))

    def quantization(self, t: Table, dtype: DataType, path: str) -> QuantParams | None:
        q = t.get("quantization")
        if q is None or dtype in (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE):
            return None
        scale, zero = q.get("scale"), q.get("zero_point")
        if scale is None or len(scale) == 0:
            return None
        zero = np.zeros(len(scale), np.int64) if zero is None or len(zero) == 0 else zero
        if len(zero) != len(scale):
            raise self.fail(f"{path}.quantization: {len(scale)} scales but {len(zero)} zero points")
        axis = int(q.get("quantized_dimension")) if len(scale) > 1 else None
        return QuantParams(np.array(scale, np.float32), np.array(zero, np.int64), axis)

    def buffer_data(self, index: int, path: str) -> memoryview | None:
        """The bytes of buffer ``index``, read in place; None for an empty buffer."""
        buffers = self.model.get("buffers")
        count = 0 if buffers is None else len(buffers)
        if index == 0:
            return None  # the empty sentinel
        if index >= count:
            raise self.fail(f"{path}.buffer: index {index} is outside the model's {count} buffers")
        b = buffers[index]
        offset, size = b.get("offset"), b.get("size")
        if offset > 1:  # stored after the flatbuffer, at an offset from the start of the file
            if offset + size > self.buf.size:
                raise self.fail(
                    f"buffers[{index}]: {size} bytes at offset {offset} run past the end of the file "
                    f"({self.buf.size} bytes)"
                )
            return self.buf.view[offset : offset + size] if size else None
        data = b.get("data")
        return data.data if data is not None and len(data) else None

    def tensor_value(self, t: Table, index: int, path: str) -> Value:
        ttype = self.tensor_type(t, path)
        name = self.namer.fresh(t.get("name") or f"tensor_{index}")
        data = self.buffer_data(t.get("buffer"), path)
        if data is None:
            return Value(name, ttype)
        if not ttype.is_static:
            raise self.fail(f"{path}: a constant with an unknown dimension {ttype.shape}")
        if t.get("sparsity") is not None:  # the nonzeros and their index tree (tflite_sparse)
            array = sparse_constant(self, t, data, ttype, path)
            v = Value(name, TensorType(ttype.dtype, ttype.shape, ttype.quant), array)
            self.block.constants[name] = v
            return v
        dtype = ttype.dtype.numpy.newbyteorder("<")
        count = int(np.prod(ttype.shape, dtype=np.int64))
        if count * dtype.itemsize != len(data):
            raise self.fail(
                f"{path}: shape {list(ttype.shape)} of {ttype.dtype.name} needs "
                f"{count * dtype.itemsize} bytes, its buffer has {len(data)}"
            )
        array = np.frombuffer(data, dtype, count).reshape(ttype.shape)
        v = Value(name, TensorType(ttype.dtype, ttype.shape, ttype.quant), array)
        self.block.constants[name] = v
        return v

    # ---- the main subgraph -------------------------------------------------------------------

    def program(self) -> Program:
        subgraphs = self.model.get("subgraphs")
        if subgraphs is None or len(subgraphs) == 0:
            raise self.fail("the model has no subgraphs")
        codes = self.operator_codes()
        signatures = self.model.get("signature_defs")
        functions: dict[str, Function] = {}
        if signatures is not None and len(signatures) > 1:
            # Several signatures: one method each, named by its key, its inputs and outputs by
            # the signature's names (as LiteRT's signature runners take them).
            for k, sig in enumerate(signatures):
                where = f"signature_defs[{k}]"
                key = sig.get("signature_key") or f"signature_{k}"
                index = sig.get("subgraph_index")
                if index >= len(subgraphs):
                    raise self.fail(
                        f"{where}.subgraph_index: {index} is outside the model's {len(subgraphs)} subgraphs"
                    )
                if key in functions:
                    raise self.fail(f"{where}: signature key '{key}' appears twice")
                names = tuple(
                    {int(m.get("tensor_index")): m.get("name") for m in sig.items(field)}
                    for field in ("inputs", "outputs")
                )
                functions[key] = self.function(subgraphs[index], index, key, codes, names)
        else:
            functions["forward"] = self.function(subgraphs[0], 0, "forward", codes, None)
        meta = {"format": "tflite", "schema_version": str(self.model.get("version"))}
        description = self.model.get("description")
        if description:
            meta["description"] = description
        return Program(functions, meta, source=self.origin)

    def function(self, graph: Table, sg: int, fn_name: str, codes, names) -> Function:
        """Subgraph ``sg`` as function ``fn_name``; ``names`` ({tensor index: name} for inputs,
        for outputs) renames its interface, as a signature does."""
        self.block = Block(name=fn_name)
        self.namer = Namer()
        self.real = {}
        self.codes = codes
        self.calling = []
        self.translated = 0
        tensors = graph.get("tensors")
        count = 0 if tensors is None else len(tensors)
        prefix = f"subgraphs[{sg}]"
        in_names, out_names = names if names is not None else ({}, {})
        if names is not None:
            listed = [int(i) for i in graph.items("inputs")], [int(i) for i in graph.items("outputs")]
            for field, mapping, want in (("inputs", in_names, listed[0]), ("outputs", out_names, listed[1])):
                if sorted(mapping) != sorted(want):
                    raise self.fail(f"signature '{fn_name}': its {field} are not the {field} of {prefix}")
            for name in [*in_names.values(), *out_names.values()]:
                self.namer.reserve(name)
        variables = self.variables = _Variables(self, codes)
        for k, i in enumerate(graph.items("inputs")):
            if not 0 <= i < count:
                raise self.fail(
                    f"{prefix}.inputs[{k}]: tensor index {i} is outside the subgraph's {count} tensors"
                )
            path = f"{prefix}.tensors[{i}]"
            name = in_names.get(int(i)) or self.namer.fresh(tensors[i].get("name") or f"input_{k}")
            self.block.inputs.append(Value(name, self.tensor_type(tensors[i], path)))
        results = self.subgraph(sg, list(self.block.inputs), variables, out_names)
        for i, v in results:
            if v.producer is None or v in self.block.outputs or i in out_names:
                v = self.op("Identity", [v])[0]  # an input, a constant, listed twice, or renamed
                if i in out_names:
                    v.name = out_names[i]
            self.block.outputs.append(v)
        return Function(fn_name, self.block, {"": 21}, variables.finish())

    def subgraph(self, sg: int, inputs: list, variables=None, out_names=None) -> list[tuple[int, Value]]:
        """Translate subgraph ``sg`` into the current block, its inputs bound to ``inputs``: its
        outputs as (tensor index, value). A subgraph another calls (WHILE, IF) has no
        ``variables``; the chain of calls is followed with a bound and checked for cycles."""
        subgraphs = self.model.get("subgraphs")
        if not 0 <= sg < len(subgraphs):
            raise self.fail(f"subgraph {sg} is outside the model's {len(subgraphs)} subgraphs")
        if sg in self.calling:
            chain = " → ".join(str(k) for k in [*self.calling, sg])
            raise self.fail(f"subgraphs call each other in a cycle ({chain})")
        if len(self.calling) >= MAX_CALL_DEPTH:
            raise self.fail(f"subgraph calls nest deeper than {MAX_CALL_DEPTH}")
        # a subgraph is translated once per call site (WHILE's condition twice): a file whose IFs
        # call the next subgraph from both branches would double the work at every level
        self.translated += 1
        if self.translated > MAX_TRANSLATIONS_PER_SUBGRAPH * len(subgraphs):
            raise self.fail(
                f"subgraphs are called more than {MAX_TRANSLATIONS_PER_SUBGRAPH}× their number in all"
            )
        # a called subgraph's values are named within it, so that they never take a name the
        # caller's own tensors (translated after them) carry
        graph = subgraphs[sg]
        scope = f"{graph.get('name') or f'subgraph_{sg}'}/" if self.calling else ""
        self.calling.append(sg)
        try:
            return self._operators(graph, sg, inputs, variables, out_names or {}, scope)
        finally:
            self.calling.pop()

    def _operators(self, graph: Table, sg: int, inputs: list, variables, out_names: dict, scope: str):
        codes = self.codes
        tensors = graph.get("tensors")
        count = 0 if tensors is None else len(tensors)
        prefix = f"subgraphs[{sg}]"

        def index(i: int, path: str) -> int:
            if not 0 <= i < count:
                raise self.fail(f"{path}: tensor index {i} is outside the subgraph's {count} tensors")
            return int(i)

        values: dict[int, Value] = {}
        listed = graph.items("inputs")
        if len(listed) != len(inputs):
            raise self.fail(f"{prefix}: takes {len(listed)} inputs, {len(inputs)} given")
        for k, (i, v) in enumerate(zip(listed, inputs)):
            values[index(i, f"{prefix}.inputs[{k}]")] = v

        def value(i: int) -> Value:
            if i not in values:
                path = f"{prefix}.tensors[{i}]"
                t = tensors[i]
                if t.get("buffer") == 0 or self.buffer_data(t.get("buffer"), path) is None:
                    if t.get("is_variable") and variables is not None:  # an LSTM's state
                        values[i] = variables.tensor(i, t, path)
                        return values[i]
                    raise self.fail(f"{path} ('{t.get('name')}') is read before any operator writes it")
                values[i] = self.tensor_value(t, i, path)
            return values[i]

        for n, op in enumerate(graph.items("operators")):
            path = f"{prefix}.operators[{n}]"
            code = op.get("opcode_index")
            if code >= len(codes):
                raise self.fail(
                    f"{path}.opcode_index: {code} is outside the model's {len(codes)} operator codes"
                )
            name, version = codes[code]
            ins = [index(i, f"{path}.inputs") if i != -1 else -1 for i in op.items("inputs")]
            outs = [index(i, f"{path}.outputs") for i in op.items("outputs")]
            _, options = op.get("builtin_options")
            if name in VARIABLE_OPS:
                if variables is None:
                    raise UnsupportedOpError(
                        f"{self.origin}: {path}: {name} in a subgraph that WHILE or IF calls is not supported"
                    )
                variables.operator(name, path, ins, outs, options, values, value, tensors)
                continue
            fn = RULES.get(name)
            if fn is None:
                hint = (
                    "register a rule for it with offload.frontends.tflite.register_custom_op"
                    if name.startswith("CUSTOM ")
                    else "docs/tflite.md lists the operators offload imports"
                )
                raise UnsupportedOpError(
                    f"{self.origin}: operator {n} ({name}, version {version}) is not supported; {hint}"
                )
            node = Node(
                self,
                n,
                name,
                version,
                [None if i == -1 else value(i) for i in ins],
                [None if i == -1 else tensors[i] for i in ins],
                [tensors[i] for i in outs],
                options,
                op,
            )
            present = sum(1 for v in node.inputs[: ARITY[name]] if v is not None)
            if present < ARITY[name]:
                raise node.fail(f"needs {ARITY[name]} inputs, has {present}")
            if not outs:
                raise node.fail("has no outputs")
            results = tflite_int8.translate(node)  # full-integer int8: LiteRT's integer arithmetic
            exact = results is not None
            if not exact and name not in ("QUANTIZE", "DEQUANTIZE"):
                self.quantization_around(node)
            results = fn(node) if not exact else results
            if len(results) != len(outs):
                raise node.fail(f"has {len(outs)} outputs, its translation {len(results)}")
            if not exact and name not in ("QUANTIZE", "DEQUANTIZE"):
                results = [
                    self.quantized(v, t, f"{path}.outputs[{k}]")
                    for k, (v, t) in enumerate(zip(results, node.outputs))
                ]
            for i, v in zip(outs, results):
                if i in values:
                    raise node.fail(f"tensor {i} is written twice")
                tname = tensors[i].get("name")
                tname = f"{scope}{tname}" if tname else tname
                if tname and tname not in self.namer.taken and i not in out_names:
                    self.namer.taken.add(tname)
                    v.name = tname
                values[i] = v

        return [(i, value(index(i, f"{prefix}.outputs[{k}]"))) for k, i in enumerate(graph.items("outputs"))]


VARIABLE_OPS = ("CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE")


class _Variables:
    """Resource variables of one function, as state (``ir.Function.states``).

    Each variable (VAR_HANDLE's ``shared_name``) is a state input whose value after the call is an
    output. Its initial value is what the CALL_ONCE subgraph assigns (constants only), applied in
    the graph itself: one more state, ``variables_initialized`` (bool, false in a fresh or reset
    module), picks ``initial`` over the state input on the first run, the way CALL_ONCE runs its
    subgraph once. A variable CALL_ONCE does not assign starts at zeros.
    """

    def __init__(self, imp: _Importer, codes):
        self.imp, self.codes = imp, codes
        self.handles: dict[int, str] = {}  # tensor index → shared name
        self.initial: dict[str, np.ndarray] = {}
        self.state: dict[str, list] = {}  # name → [state input, current value]
        self.flag: Value | None = None
        self.tensors: dict[int, str] = {}  # id of a variable tensor's value → its variable

    def operator(self, name, path, ins, outs, options, values, value, tensors) -> None:
        imp = self.imp
        if name == "CALL_ONCE":
            if options is None or "init_subgraph_index" not in options.fields:
                raise imp.fail(f"{path}: CALL_ONCE without CallOnceOptions")
            self.init_subgraph(int(options.get("init_subgraph_index")), path)
        elif name == "VAR_HANDLE":
            if len(outs) != 1:
                raise imp.fail(f"{path}: VAR_HANDLE has {len(outs)} outputs")
            self.handles[outs[0]] = _shared_name(options, outs[0])
        elif name == "READ_VARIABLE":
            if len(ins) != 1 or len(outs) != 1 or ins[0] not in self.handles:
                raise imp.fail(f"{path}: READ_VARIABLE reads no variable handle")
            v = self.current(self.handles[ins[0]], tensors[outs[0]], path)
            values[outs[0]] = imp.op("Identity", [v])[0]
        else:  # ASSIGN_VARIABLE
            if len(ins) != 2 or ins[0] not in self.handles:
                raise imp.fail(f"{path}: ASSIGN_VARIABLE assigns no variable handle")
            var = self.handles[ins[0]]
            new = value(ins[1])
            self.current(var, tensors[ins[1]], path)
            old = self.state[var][0]
            if new.type is not None and new.type.dtype != old.type.dtype:
                raise imp.fail(
                    f"{path}: variable '{var}' of {old.type.dtype.name} assigned {new.type.dtype.name}"
                )
            self.state[var][1] = new

    def tensor(self, index: int, t: Table, path: str) -> Value:
        """A variable tensor an operator reads and updates (an LSTM's output and cell state): a
        variable of its own, zeros at first, kept between calls as LiteRT keeps it."""
        var = f"{t.get('name') or 'tensor'}:{index}"
        v = self.current(var, t, path)
        self.tensors[id(v)] = var
        return v

    def assign_tensor(self, read: Value, new: Value) -> None:
        """Set the variable tensor that ``read`` (what ``tensor`` gave) came from to ``new``."""
        var = self.tensors.get(id(read))
        if var is None:
            raise self.imp.fail(f"'{read.name}' is not a variable tensor")
        self.state[var][1] = new

    def init_subgraph(self, index: int, path: str) -> None:
        """CALL_ONCE: its subgraph translated into this function (``imp.subgraph``, which checks
        the index and the call chain) with its ASSIGN_VARIABLEs recorded as initial values. A
        computed value is computed in the graph and taken on the first run only; computed from
        constants, as initialisers are, the constant-folding pass makes it a constant."""
        init = _InitAssignments(self.imp)
        try:
            self.imp.subgraph(index, [], init)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"{e} (in the CALL_ONCE subgraph of {path})") from None
        for var, v in init.assigned.items():
            if v.const_value is not None and v.producer is None:
                self.imp.block.constants.pop(v.name, None)  # current() adds the constant it uses
                self.initial[var] = v.const_value
            else:
                self.initial[var] = v

    def current(self, var: str, t: Table, path: str) -> Value:
        """The variable's value so far; its state input (and initial value) made on first use."""
        imp = self.imp
        if var not in self.state:
            initial = self.initial.get(var)
            if initial is None or isinstance(initial, Value):  # zeros, or computed by CALL_ONCE
                ttype = imp.tensor_type(t, path)
                if not ttype.is_static:
                    raise UnsupportedOpError(f"{imp.origin}: {path}: variable '{var}' of unknown shape")
                stype = TensorType(ttype.dtype, ttype.shape)
                if initial is None:
                    initial = imp.const(np.zeros(ttype.shape, ttype.dtype.numpy))
            else:
                stype = TensorType(DataType.from_numpy(initial.dtype), initial.shape)
                initial = imp.const(np.ascontiguousarray(initial).reshape(initial.shape))
            if self.flag is None:
                self.flag = Value(imp.namer.fresh("variables_initialized"), TensorType(DataType.BOOL, ()))
                imp.block.inputs.append(self.flag)
            state = Value(imp.namer.fresh(var), stype)
            imp.block.inputs.append(state)
            first = imp.op("Where", [self.flag, state, initial])[0]
            self.state[var] = [state, first]
        return self.state[var][1]

    def finish(self) -> list[str]:
        """The state names; the variables' last values and a true flag appended as outputs."""
        if self.flag is None:
            return []
        imp = self.imp
        for _, current in self.state.values():
            imp.block.outputs.append(imp.op("Identity", [current])[0])
        imp.block.outputs.append(imp.op("Identity", [imp.const(np.array(True))])[0])
        return [state.name for state, _ in self.state.values()] + [self.flag.name]


class _InitAssignments:
    """The variable operators of a CALL_ONCE subgraph: VAR_HANDLE names a variable, ASSIGN_VARIABLE
    records its initial value; reading a variable there is refused."""

    def __init__(self, imp: _Importer):
        self.imp = imp
        self.handles: dict[int, str] = {}
        self.assigned: dict[str, Value] = {}

    def operator(self, name, path, ins, outs, options, values, value, tensors) -> None:
        if name == "VAR_HANDLE" and len(outs) == 1:
            self.handles[outs[0]] = _shared_name(options, outs[0])
        elif name == "ASSIGN_VARIABLE" and len(ins) == 2 and ins[0] in self.handles:
            self.assigned[self.handles[ins[0]]] = value(ins[1])
        else:
            raise UnsupportedOpError(
                f"{self.imp.origin}: {path}: {name} in a CALL_ONCE subgraph (VAR_HANDLE, "
                "ASSIGN_VARIABLE and computing operators are supported)"
            )

    def tensor(self, index: int, t: Table, path: str) -> Value:
        raise UnsupportedOpError(f"{self.imp.origin}: {path}: a variable tensor in a CALL_ONCE subgraph")


def _shared_name(options, index: int) -> str:
    name = options.get("shared_name") if options is not None and "shared_name" in options.fields else None
    return name or f"variable_{index}"


def import_tflite(data: bytes, origin: str = "<bytes>") -> Program:
    """Import the bytes of a .tflite file (its main subgraph) into an ir.Program."""
    program = _Importer(data, origin).program()
    try:
        infer_types(program)
        verify(program)
    except VerificationError as e:
        raise ModelFormatError(f"{origin}: {e}") from None
    except OffloadError as e:
        if isinstance(e, (ModelFormatError, UnsupportedOpError)):
            raise
        raise ModelFormatError(f"{origin}: the operators do not fit the tensors they read: {e}") from None
    return program


from . import tflite_control, tflite_lstm, tflite_slices  # noqa: E402, F401  (register their rules)
from .tflite_custom import register_custom_op  # noqa: E402, F401
from .tflite_sparse import sparse_constant  # noqa: E402  (also registers DENSIFY)
