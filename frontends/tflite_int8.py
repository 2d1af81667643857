"""Full-integer TFLite operators as ``offload.tflite`` integer ops, computed as LiteRT's CPU does.

An operator whose activations (inputs read from other operators and outputs) are int8 tensors
with one scale and zero point each is translated by its rule in ``RULES`` into the integer op
of ir/tflite_ops.py, its weights and biases kept as the raw int8/int32 constants of the file and
every quantization parameter written on the op. The legacy uint8 models (activations and weights
uint8 with their zero points) take the same rules where ``UINT8_RULES`` lists the operator: the
same arithmetic on 0..255, the weights' zero point written on the op (``w_zero_point``). The fused activation becomes the op's output
clamp (``y_min``/``y_max``: TFLite's activation range in output units). Unary operators become
``Lookup`` over a 256-entry table built here by the arithmetic of the kernel LiteRT runs
(tflite_int8_tables.py). An operator without a rule here (or a case a rule declines: int16,
int8 and uint8 mixed, per-axis activations, a fused TANH) keeps the float rule between DequantizeLinear and
QuantizeLinear (tflite_quant.py case 2): exact for max/min pools and reductions, data movement,
and within LiteRT's rounding for softmax and log-softmax (docs/tflite.md "Quantization").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from offload.ir import DataType, Operation, TensorType, Value
from offload.ir.tflite_ops import DOMAIN
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act

from . import tflite_node as base
from .tflite_int8_tables import float_table, hard_swish_table, leaky_relu_table, requantize_table

Rule = Callable[["base.Node"], "list | None"]
RULES: dict[str, Rule] = {}


def rule(*names: str):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


# The operators whose uint8 form LiteRT computes as its int8 form on 0..255 (measured: 0 units
# against LiteRT over seeded inputs, tests/frontends/test_tflite_uint8.py). The others keep the
# float rule on uint8: SUM (LiteRT's uint8 sum rounds otherwise: 35 of 320 outputs a unit off
# with the int8 arithmetic, 22 with the float rule) and the operators LiteRT 2.3.0 refuses on
# uint8 (SQUARED_DIFFERENCE, EXP, ELU, ABS, RSQRT).
UINT8_RULES = frozenset(
    {
        *("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV", "MEAN"),
        *("AVERAGE_POOL_2D", "RESIZE_BILINEAR", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU"),
        *("QUANTIZE", "RELU", "RELU6", "RELU_N1_TO_1"),
    }
)


def translate(node) -> list | None:
    """``node`` as integer ops when it is a full-integer int8 (or uint8, ``UINT8_RULES``)
    operator with a rule; else None (and nothing added), so the caller translates it the float way."""
    fn = RULES.get(node.name)
    dtype = None if fn is None else _activation_dtype(node)
    if dtype is None or (dtype == DataType.UINT8 and node.name not in UINT8_RULES):
        return None
    results = fn(node)
    for v, t in zip(results or [], node.outputs):  # typed now: the next operator reads its scale
        declared = node.imp.tensor_type(t, f"operator {node.index} output")
        v.type = TensorType(declared.dtype, None, declared.quant)
    return results


EIGHT_BIT = (DataType.INT8, DataType.UINT8)


def _per_tensor_8bit(t, dtypes=EIGHT_BIT) -> bool:
    return t is not None and t.dtype in dtypes and t.quant is not None and t.quant.scale.size == 1


def _activation_dtype(node) -> DataType | None:
    """INT8 or UINT8 where every activation is a per-tensor quantized tensor of that one type."""
    types = [v.type for v in node.inputs if v is not None and v.const_value is None]
    types += [node.imp.tensor_type(t, f"operator {node.index} output") for t in node.outputs]
    if not all(_per_tensor_8bit(t) for t in types) or len({t.dtype for t in types}) != 1:
        return None
    for t in types:
        scale = float(t.quant.scale.reshape(-1)[0])
        if not np.isfinite(scale) or scale <= 0:
            raise node.fail(
                f"an {t.dtype.name.lower()} tensor has quantization scale {scale}, not a positive number"
            )
    return types[0].dtype


def _limits(node) -> tuple[int, int]:
    """The output type's range: int8's, or uint8's."""
    info = np.iinfo(node.imp.tensor_type(node.outputs[0], f"operator {node.index} output").dtype.numpy)
    return int(info.min), int(info.max)


def _q(t) -> tuple[float, int]:
    return float(t.quant.scale.reshape(-1)[0]), int(t.quant.zero_point.reshape(-1)[0])


def _in(node, i: int) -> tuple[float, int]:
    """Input ``i``'s scale and zero point; a constant input is not checked by ``_activation_dtype``."""
    v = node.inputs[i] if i < len(node.inputs) else None
    out = node.imp.tensor_type(node.outputs[0], f"operator {node.index} output")
    if v is None or not _per_tensor_8bit(v.type, (out.dtype,)):
        name = out.dtype.name.lower()
        raise node.fail(
            f"input {i} is not an {name} tensor with one quantization scale, as its {name} operator needs"
        )
    return _q(v.type)


def _out(node, i: int = 0) -> tuple[float, int]:
    return _q(node.imp.tensor_type(node.outputs[i], f"operator {node.index} output {i}"))


def _round(x: float) -> int:
    """TfLiteRound: half away from zero. A bound past any int (6 / a subnormal scale is inf)
    is one far outside int8, which the clamp then cuts to the type's range."""
    if not np.isfinite(x):
        return int(np.sign(x)) << 32
    return int(np.sign(x) * np.floor(abs(x) + 0.5))


def clamp(node, scale: float, zero: int, code=None) -> tuple[int, int] | None:
    """The fused activation's range in output units (CalculateActivationRangeQuantized), within
    the output type's; None for an activation that is no clamp (TANH, SIGN_BIT)."""
    low, high = _limits(node)
    if code is None:
        code = node.opt("fused_activation_function") if node.options is not None else Act.NONE
    s = np.float32(scale)
    with np.errstate(over="ignore"):  # a subnormal scale: _round takes the infinite bound
        six, one = np.float32(6.0) / s, np.float32(1.0) / s
    bounds = {
        Act.NONE: (low, high),
        Act.RELU: (zero, high),
        Act.RELU6: (zero, zero + _round(float(six))),
        Act.RELU_N1_TO_1: (zero + _round(-float(one)), zero + _round(float(one))),
    }.get(code)
    if bounds is None:
        return None
    return max(bounds[0], low), min(bounds[1], high)


def _op(node, op_type: str, inputs: list, attrs: dict) -> Value:
    imp = node.imp
    op = Operation(op_type, inputs, attrs, domain=DOMAIN, output_names=[imp.namer.fresh(op_type)])
    return imp.block.append(op).outputs[0]


def _output_attrs(node, lo_hi: tuple[int, int]) -> dict:
    scale, zero = _out(node)
    return {"y_scale": scale, "y_zero_point": zero, "y_min": lo_hi[0], "y_max": lo_hi[1]}


# ---------------------------------------------------------------------------------------------
# Convolution and dense: XNNPACK's fp32 requantization per output channel.


def _filter_scales(node, i: int, channels: int) -> dict:
    """``w_scales`` (one per output channel), and for uint8 weights their ``w_zero_point``: int8
    weights are symmetric (one scale per tensor or per channel), uint8 ones per tensor with a
    zero point; {} for weights LiteRT's integer kernels do not take."""
    w = node.inputs[i]
    dtype = node.imp.tensor_type(node.outputs[0], f"operator {node.index} output").dtype
    if w.const_value is None or w.type.quant is None or w.type.dtype != dtype:
        return {}
    scales = w.type.quant.scale.astype(np.float32).reshape(-1)
    zeros = np.asarray(w.type.quant.zero_point).reshape(-1)
    if dtype == DataType.UINT8:
        if scales.size != 1 or zeros.size != 1:
            return {}
        return {"w_scales": [float(scales[0])] * channels, "w_zero_point": int(zeros[0])}
    if (zeros != 0).any() or scales.size not in (1, channels):
        return {}
    return {"w_scales": [float(s) for s in np.broadcast_to(scales, (channels,))]}


def _linear_attrs(node, channels: int) -> dict | None:
    weights = _filter_scales(node, 1, channels)
    lo_hi = clamp(node, *_out(node))
    if not weights or lo_hi is None:
        return None
    x_scale, x_zero = _in(node, 0)
    return {"x_scale": x_scale, "x_zero_point": x_zero, **weights, **_output_attrs(node, lo_hi)}


def _bias(node, i: int) -> Value | None:
    b = node.inputs[i] if i < len(node.inputs) else None
    return None if b is None else node.imp.const(np.asarray(b.const_value, np.int32))


@rule("CONV_2D", "DEPTHWISE_CONV_2D")
def conv(node) -> list | None:
    if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].const_value is None:
        return None
    _, kh, kw, last = node.shape(1, 4)
    c = node.dims(0, 4)[3]
    depthwise = node.name == "DEPTHWISE_CONV_2D"
    out_channels = last if depthwise else node.shape(1)[0]
    attrs = _linear_attrs(node, out_channels)
    if attrs is None or not isinstance(c, int):
        return None
    dilation = (node.opt("dilation_h_factor"), node.opt("dilation_w_factor"))
    attrs.update(base.spatial_attrs(node, (kh, kw), dilation))
    group = c if depthwise else c // last
    if group < 1 or (depthwise and last % c) or (not depthwise and c % last):
        raise node.fail(f"filter channels {last} do not fit the input's {c}")
    attrs.update(kernel_shape=[kh, kw], dilations=list(dilation), group=group)
    w = base.permuted(node, 1, [3, 0, 1, 2] if depthwise else [0, 3, 1, 2])
    x = node.one("Transpose", [node.inputs[0]], {"perm": base.NHWC_TO_NCHW})
    y = _op(node, "Conv", [x, w, _bias(node, 2)], attrs)
    return [node.one("Transpose", [y], {"perm": base.NCHW_TO_NHWC})]


@rule("FULLY_CONNECTED")
def fully_connected(node) -> list | None:
    if node.opt("weights_format") != 0 or node.inputs[1].const_value is None:
        return None
    n, k = node.shape(1, 2)
    attrs = _linear_attrs(node, n)
    if attrs is None:
        return None
    x = node.inputs[0]
    keep = node.opt("keep_num_dims")
    if not keep and len(node.shape(0)) != 2:
        x = node.one("Reshape", [x, node.ints([-1, k])])
    return [_op(node, "FullyConnected", [x, node.inputs[1], _bias(node, 2)], attrs)]


# ---------------------------------------------------------------------------------------------
# Elementwise binary operators.

BINARY = {"ADD": "Add", "SUB": "Sub", "MUL": "Mul", "DIV": "Div", "SQUARED_DIFFERENCE": "SquaredDifference"}


@rule(*BINARY)
def binary(node) -> list | None:
    lo_hi = clamp(node, *_out(node))
    if lo_hi is None:
        return None
    (a_scale, a_zero), (b_scale, b_zero) = _in(node, 0), _in(node, 1)
    attrs = {"a_scale": a_scale, "a_zero_point": a_zero, "b_scale": b_scale, "b_zero_point": b_zero}
    attrs.update(_output_attrs(node, lo_hi))
    return [_op(node, BINARY[node.name], node.inputs[:2], attrs)]


# ---------------------------------------------------------------------------------------------
# Pools and reductions.


@rule("AVERAGE_POOL_2D")
def average_pool(node) -> list | None:
    lo_hi = clamp(node, *_out(node))
    if lo_hi is None or _in(node, 0) != _out(node):
        return None  # TFLite's int8 average pool keeps the input's quantization
    kernel = (node.opt("filter_height"), node.opt("filter_width"))
    attrs = base.spatial_attrs(node, kernel, (1, 1))
    attrs.update(kernel_shape=list(kernel), **_output_attrs(node, lo_hi))
    x = node.one("Transpose", [node.inputs[0]], {"perm": base.NHWC_TO_NCHW})
    y = _op(node, "AveragePool", [x], attrs)
    return [node.one("Transpose", [y], {"perm": base.NCHW_TO_NHWC})]


@rule("MEAN", "SUM")
def mean_or_sum(node) -> list | None:
    axes = node.const(1).astype(np.int64).reshape(-1)
    if axes.size == 0:
        return None
    x_scale, x_zero = _in(node, 0)
    attrs = {"keepdims": int(bool(node.opt("keep_dims"))), "x_scale": x_scale, "x_zero_point": x_zero}
    attrs.update(_output_attrs(node, _limits(node)))
    return [_op(node, "Mean" if node.name == "MEAN" else "Sum", [node.inputs[0], node.ints(axes)], attrs)]


@rule("RESIZE_BILINEAR")
def resize_bilinear(node) -> list | None:
    align, half = bool(node.opt("align_corners")), bool(node.opt("half_pixel_centers"))
    if node.inputs[1].const_value is None or _in(node, 0) != _out(node) or (align and half):
        return None  # XNNPACK's int8 resize keeps the input's quantization
    mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
    attrs = {"coordinate_transformation_mode": mode, **_output_attrs(node, _limits(node))}
    sizes = node.ints(node.const(1).astype(np.int64).reshape(-1))
    return [_op(node, "ResizeBilinear", [node.inputs[0], sizes], attrs)]


# ---------------------------------------------------------------------------------------------
# Unary operators: a table of the 256 inputs.


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _elu(x):
    return np.where(x < 0, np.expm1(np.minimum(x, 0)), x)


def _rsqrt(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


# name → (the function the float form takes, how its table is built: of the node, its
# (x_scale, x_zero, y_scale, y_zero) and the numpy type, int8 or uint8)
UNARY: dict[str, tuple[str, Callable]] = {
    "TANH": ("Tanh", lambda node, q, d: float_table(np.tanh, *q, d)),
    "LOGISTIC": ("Sigmoid", lambda node, q, d: float_table(_sigmoid, *q, d)),
    "EXP": ("Exp", lambda node, q, d: float_table(np.exp, *q, d)),
    "RSQRT": ("Rsqrt", lambda node, q, d: float_table(_rsqrt, *q, d)),
    "ELU": ("Elu", lambda node, q, d: float_table(_elu, *q, d)),
    "HARD_SWISH": ("HardSwish", lambda node, q, d: hard_swish_table(*q, d)),
    "LEAKY_RELU": ("LeakyRelu", lambda node, q, d: leaky_relu_table(float(node.opt("alpha")), *q, d)),
    "QUANTIZE": ("Identity", lambda node, q, d: leaky_relu_table(1.0, *q, d)),
    "ABS": ("Abs", lambda node, q, d: requantize_table(*q, absolute=True, dtype=d)),
    "RELU": ("Relu", lambda node, q, d: requantize_table(*q, *clamp(node, *q[2:], Act.RELU), dtype=d)),
    "RELU6": ("Relu6", lambda node, q, d: requantize_table(*q, *clamp(node, *q[2:], Act.RELU6), dtype=d)),
    "RELU_N1_TO_1": (
        "ReluN1To1",
        lambda node, q, d: requantize_table(*q, *clamp(node, *q[2:], Act.RELU_N1_TO_1), dtype=d),
    ),
}


@rule(*UNARY)
def unary(node) -> list | None:
    if node.inputs[0].const_value is not None:
        return None
    function, table = UNARY[node.name]
    q = (*_in(node, 0), *_out(node))
    alpha = float(node.opt("alpha")) if node.name == "LEAKY_RELU" else 0.0
    attrs = {"function": function, "alpha": alpha, "x_scale": q[0], "x_zero_point": q[1]}
    attrs.update(_output_attrs(node, _limits(node)))
    dtype = node.imp.tensor_type(node.outputs[0], f"operator {node.index} output").dtype.numpy
    return [_op(node, "Lookup", [node.inputs[0], node.imp.const(table(node, q, dtype))], attrs)]
