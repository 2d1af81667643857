"""com.microsoft's quantized operators as ONNX quantization ops.

- **MatMulIntegerToFloat**: MatMulInteger, Cast to float, times a_scale * b_scale (the product
  first, as onnxruntime multiplies each sum by it), plus the bias.
- **DynamicQuantizeMatMul**: DynamicQuantizeLinear of A (uint8, the range widened to hold 0, as
  onnxruntime quantizes it), then the same.
- **QAttention**: MatMulInteger of the quantized input and the packed Q | K | V weights (zero
  points per tensor, the weight's per column too), Cast to float, times input_scale *
  weight_scale, plus the bias, then Attention's split, past, mask and ONNX Attention
  (onnx_contrib_attention.py). onnxruntime's CPU takes a uint8 input only; an int8 one is the
  same integer product.
- **QGemm**: MatMulInteger of the (transposed) operands plus the int32 C, times
  alpha * a_scale * b_scale; quantized with y_scale / y_zero_point where given, float otherwise.
- **QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
  QLinearGlobalAveragePool, QLinearConcat, QLinearSoftmax, QLinearWhere**: DequantizeLinear of
  each input, the float op, QuantizeLinear of the result (a missing zero point is 0 of the input's
  type). onnxruntime computes the same values through scale ratios (MLAS) or a 256-entry table:
  on a value within float32 rounding of a tie the two round apart, one quantization step
  (QLinearSoftmax and QLinearWhere: none in 0.8 million values measured).
- **QLinearConv** of com.microsoft (``channels_last``: X and Y as N…C): ONNX's QLinearConv between
  Transposes.
- **DynamicQuantizeLSTM** stays one operation (its schema in ir/contrib_ops.py): it quantizes X
  and each step's hidden state to uint8 on the fly, which no ONNX LSTM reproduces, so its CPU
  kernel (runtime/kernels/recurrent_quantized.py) computes onnxruntime's integer products. The
  import checks the forms it takes: every scale and zero point given, int8 or uint8 weights with
  zero points of their type, scales and zero points per direction or per column alike.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .onnx_contrib import _Node, contrib
from .onnx_contrib_attention import packed_attention


def _to_float(n: _Node, acc: Value, scale: Value, bias: Value | None) -> Value:
    y = n.one("Mul", [n.one("Cast", [acc], {"to": int(DataType.FLOAT)}), scale])
    return y if bias is None else n.one("Add", [y, bias])


@contrib("MatMulIntegerToFloat")
def _matmul_integer_to_float(n: _Node):
    a, b, a_scale, b_scale, a_zero, b_zero, bias = (n.input(i) for i in range(7))
    acc = n.one("MatMulInteger", [a, b, a_zero, b_zero])
    return [_to_float(n, acc, n.one("Mul", [a_scale, b_scale]), bias)]


@contrib("DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(n: _Node):
    a, b, b_scale, b_zero, bias = (n.input(i) for i in range(5))
    qa, a_scale, a_zero = n.op("DynamicQuantizeLinear", [a], num_outputs=3)
    acc = n.one("MatMulInteger", [qa, b, a_zero, b_zero])
    return [_to_float(n, acc, n.one("Mul", [a_scale, b_scale]), bias)]


def _zero(n: _Node, zero: Value | None, like: Value) -> Value:
    """A zero point, or 0 of ``like``'s quantized type where the node omits it."""
    return zero if zero is not None else n.const(0, n.dtype(like).numpy)


def _dequantized(n: _Node, x: Value, scale: Value, zero: Value | None) -> Value:
    return n.one("DequantizeLinear", [x, scale, zero])


def _quantized(n: _Node, y: Value, scale: Value, zero: Value | None, like: Value) -> Value:
    return n.one("QuantizeLinear", [y, scale, _zero(n, zero, like)])


@contrib("QAttention")
def _q_attention(n: _Node):
    x, w, bias, x_scale, w_scale, mask, x_zero, w_zero, past = (n.input(i) for i in range(9))
    for value, zero in ((x, x_zero), (w, w_zero)):
        types = {n.dtype(value)} | ({n.dtype(zero)} if zero is not None else set())
        if not types <= {DataType.INT8, DataType.UINT8} or len(types) != 1:
            names = f"'{value.name}'" + (f" and zero point '{zero.name}'" if zero is not None else "")
            raise n.refuse(f"with {names} of {sorted(t.name.lower() for t in types)} (int8 or uint8, alike)")
    acc = n.one("MatMulInteger", [x, w, x_zero, w_zero])
    proj = _to_float(n, acc, n.one("Mul", [x_scale, w_scale]), bias)
    return packed_attention(n, proj, w, mask, past, None)


@contrib("QGemm")
def _qgemm(n: _Node):
    a, a_scale, a_zero, b, b_scale, b_zero, c, y_scale, y_zero = (n.input(i) for i in range(9))
    if n.attr("transA", 0):
        a = n.one("Transpose", [a], {"perm": [1, 0]})
    if n.attr("transB", 0):
        b = n.one("Transpose", [b], {"perm": [1, 0]})
    acc = n.one("MatMulInteger", [a, b, a_zero, b_zero])
    if c is not None:
        acc = n.one("Add", [acc, c])
    scale = n.one("Mul", [a_scale, b_scale])
    alpha = float(n.attr("alpha", 1.0))
    if alpha != 1.0:
        scale = n.one("Mul", [scale, n.const(alpha, np.float32)])
    y = _to_float(n, acc, scale, None)
    if y_scale is None:
        return [y]
    return [n.one("QuantizeLinear", [y, y_scale, _zero(n, y_zero, a)])]


@contrib("QLinearAdd", "QLinearMul")
def _qlinear_binary(n: _Node):
    a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero = (n.input(i) for i in range(8))
    fa, fb = _dequantized(n, a, a_scale, a_zero), _dequantized(n, b, b_scale, b_zero)
    y = n.one(n.op_type.removeprefix("QLinear"), [fa, fb])
    return [_quantized(n, y, c_scale, c_zero, a)]


@contrib("QLinearSigmoid", "QLinearLeakyRelu")
def _qlinear_unary(n: _Node):
    x, x_scale, x_zero, y_scale, y_zero = (n.input(i) for i in range(5))
    fx = _dequantized(n, x, x_scale, x_zero)
    if n.op_type == "QLinearSigmoid":
        y = n.one("Sigmoid", [fx])
    else:
        y = n.one("LeakyRelu", [fx], {"alpha": float(n.attr("alpha", 0.01))})
    return [_quantized(n, y, y_scale, y_zero, x)]


def _channels_first(n: _Node, x: Value, last: bool) -> tuple[Value, list[int] | None]:
    """``x`` with its channels at axis 1, and the permutation back (None where it was so)."""
    if not last:
        return x, None
    rank = n.rank(x)
    to_first = [0, rank - 1, *range(1, rank - 1)]
    back = [0, *range(2, rank), 1]
    return n.one("Transpose", [x], {"perm": to_first}), back


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")


@contrib("QLinearAveragePool", "QLinearGlobalAveragePool")
def _qlinear_pool(n: _Node):
    x, x_scale, x_zero, y_scale, y_zero = (n.input(i) for i in range(5))
    fx, back = _channels_first(n, _dequantized(n, x, x_scale, x_zero), bool(n.attr("channels_last", 0)))
    if n.op_type == "QLinearAveragePool":
        attrs = {k: v for k, v in n.attrs.items() if k in _POOL_ATTRS}
        y = n.one("AveragePool", [fx], attrs)
    else:
        y = n.one("GlobalAveragePool", [fx])
    if back is not None:
        y = n.one("Transpose", [y], {"perm": back})
    return [_quantized(n, y, y_scale, y_zero, x)]


@contrib("QLinearConcat")
def _qlinear_concat(n: _Node):
    y_scale, y_zero, *rest = n.inputs
    if not rest or len(rest) % 3:
        raise n.refuse(f"with {len(rest)} inputs after Y_scale, Y_zero_point (triples expected)")
    parts = [_dequantized(n, *rest[i : i + 3]) for i in range(0, len(rest), 3)]
    y = n.one("Concat", parts, {"axis": int(n.attr("axis"))})
    return [_quantized(n, y, y_scale, y_zero, rest[0])]


@contrib("DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(n: _Node):
    """The node as it is (ir/contrib_ops.py, runtime/kernels/recurrent_quantized.py), once the
    forms onnxruntime takes are checked: every scale and zero point given, each zero point of its
    scale's shape and its weight's type."""
    ins = [n.input(i) for i in range(12)]
    w, r, (w_scale, w_zero, r_scale, r_zero) = ins[1], ins[2], ins[8:]
    if w_zero is None or r_zero is None or w_scale is None or r_scale is None:
        raise n.refuse("without W_scale, W_zero_point, R_scale and R_zero_point")
    for weight, scale, zero in ((w, w_scale, w_zero), (r, r_scale, r_zero)):
        types = (n.dtype(weight), n.dtype(zero))
        if types[0] not in (DataType.INT8, DataType.UINT8) or types[1] != types[0]:
            raise n.refuse(
                f"with weight '{weight.name}' of {types[0].name.lower()} and zero point '{zero.name}' of "
                f"{types[1].name.lower()} (both int8 or both uint8, as onnxruntime takes them)"
            )
        if n.rank(zero) != n.rank(scale) or n.rank(scale) not in (1, 2):
            raise n.refuse(
                f"with zero point '{zero.name}' of rank {n.rank(zero)} and scale '{scale.name}' of rank "
                f"{n.rank(scale)} (both [directions] or both [directions, 4 * hidden_size])"
            )
    return n.op("DynamicQuantizeLSTM", ins, dict(n.attrs), num_outputs=3, domain=n.domain)


@contrib("QLinearSoftmax")
def _qlinear_softmax(n: _Node):
    """Softmax of the dequantized input: over ``axis`` (default -1) alone where the ``opset``
    attribute is 13 or later, over the flattened axes from ``axis`` on before that (Softmax-1's
    form)."""
    x, x_scale, x_zero, y_scale, y_zero = (n.input(i) for i in range(5))
    opset = int(n.attrs["opset"])
    axis = int(n.attr("axis", -1))
    rank = n.rank(x)
    if not -rank <= axis < rank:
        raise n.refuse(f"with axis={axis} for an input of rank {rank}")
    fx = _dequantized(n, x, x_scale, x_zero)
    if opset >= 13:
        y = n.one("Softmax", [fx], {"axis": axis})
    else:
        flat = n.one("Softmax", [n.one("Flatten", [fx], {"axis": axis % rank})], {"axis": -1})
        y = n.one("Reshape", [flat, n.one("Shape", [fx])])
    return [_quantized(n, y, y_scale, y_zero, x)]


@contrib("QLinearWhere")
def _qlinear_where(n: _Node):
    cond, x, x_scale, x_zero, y, y_scale, y_zero, z_scale, z_zero = (n.input(i) for i in range(9))
    fx, fy = _dequantized(n, x, x_scale, x_zero), _dequantized(n, y, y_scale, y_zero)
    return [_quantized(n, n.one("Where", [cond, fx, fy]), z_scale, z_zero, x)]


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@contrib("QLinearConv")
def _qlinear_conv_channels_last(n: _Node):
    """ONNX's QLinearConv, between Transposes where ``channels_last`` says X and Y are N…C."""
    ins = [n.input(i) for i in range(9)]
    x, back = _channels_first(n, ins[0], bool(n.attr("channels_last", 0)))
    attrs = {k: v for k, v in n.attrs.items() if k in _CONV_ATTRS}
    y = n.one("QLinearConv", [x, *ins[1:]], attrs)
    return [y if back is None else n.one("Transpose", [y], {"perm": back})]
