"""com.microsoft's quantized operators as ONNX quantization ops.

- **MatMulIntegerToFloat**: MatMulInteger, Cast to float, times a_scale * b_scale (the product
  first, as onnxruntime multiplies each sum by it), plus the bias.
- **DynamicQuantizeMatMul**: DynamicQuantizeLinear of A (uint8, the range widened to hold 0, as
  onnxruntime quantizes it), then the same.
- **QGemm**: MatMulInteger of the (transposed) operands plus the int32 C, times
  alpha * a_scale * b_scale; quantized with y_scale / y_zero_point where given, float otherwise.
- **QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool,
  QLinearGlobalAveragePool, QLinearConcat**: DequantizeLinear of each input, the float op,
  QuantizeLinear of the result (a missing zero point is 0 of the input's type). onnxruntime
  computes the same values through scale ratios (MLAS) or a 256-entry table: on a value within
  float32 rounding of a tie the two round apart, one quantization step.
- **DynamicQuantizeLSTM**: the int8/uint8 weights W [D, input, 4H] and R [D, hidden, 4H]
  dequantized with their per-direction ([D]) or per-column ([D, 4H]) scales and zero points and
  transposed to LSTM's [D, 4H, input] / [D, 4H, hidden], then a float LSTM with the node's
  attributes. onnxruntime's kernel also quantizes X and each step's hidden state to uint8 on the
  fly; the float LSTM computes without that rounding (tests/frontends/test_onnx_contrib_quant.py
  bounds the difference against onnxruntime).
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .onnx_contrib import _Node, contrib


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


def _lstm_weights(n: _Node, q: Value, scale: Value, zero: Value) -> Value:
    """A DynamicQuantizeLSTM weight [D, rows, 4H] as LSTM's float [D, 4H, rows]."""
    per_column = n.rank(scale) == 2  # [D, 4H]; per direction it is [D]
    if n.rank(zero) != n.rank(scale):
        raise n.refuse(f"with zero point '{zero.name}' of another rank than scale '{scale.name}'")
    shape = n.const([0, 1, -1] if per_column else [-1, 1, 1])
    as_float = {"to": int(DataType.FLOAT)}
    zero_f = n.one("Cast", [n.one("Reshape", [zero, shape])], as_float)
    centred = n.one("Sub", [n.one("Cast", [q], as_float), zero_f])
    return n.one(
        "Transpose", [n.one("Mul", [centred, n.one("Reshape", [scale, shape])])], {"perm": [0, 2, 1]}
    )


@contrib("DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(n: _Node):
    x, w, r, b, lens, h0, c0, p, w_scale, w_zero, r_scale, r_zero = (n.input(i) for i in range(12))
    if w_zero is None or r_zero is None or w_scale is None or r_scale is None:
        raise n.refuse("without W_scale, W_zero_point, R_scale and R_zero_point")
    inputs = [
        x,
        _lstm_weights(n, w, w_scale, w_zero),
        _lstm_weights(n, r, r_scale, r_zero),
        b,
        lens,
        h0,
        c0,
        p,
    ]
    while inputs[-1] is None:
        inputs.pop()
    return n.op("LSTM", inputs, dict(n.attrs), num_outputs=3)
