"""quantization::integer_as_float — a quantized model's activations as float, the TFLite GPU delegate's way.

For the GPU backends (``BackendCompiler.quantized_as_float``; ``offload.to_backend`` runs this
pass before partitioning for them): weights are dequantized once, activations stay float from
the model's inputs to its outputs, and only the model's int8 inputs and outputs are
(de)quantized at the edges. The CPU path keeps the exact integer ops. Rules, per op in order,
each int8 value with a scale getting a float "real" value:

1. An ``offload.tflite`` integer op becomes its float operator (``FLOAT_FORMS``) on the real
   values of its inputs: Conv / FullyConnected read their int8 weights dequantized per output
   channel (uint8 weights less their ``w_zero_point``; int32 biases at x_scale · w_scale), a Lookup becomes the function it tabulates
   (``function``: Tanh, Sigmoid, HardSwish, LeakyRelu …), and the output clamp (the fused
   activation and the int8 range, ``[y_min, y_max]``) a Clip of its real range.
2. ``QuantizeLinear(f)`` inside the model is dropped: its real value is ``f`` clamped to the
   real range of its integer type (the saturation kept, the rounding not).
3. ``DequantizeLinear(q)`` of a value with a real value is that real value.
4. Data movement and order-preserving ops (``TRANSPARENT``: Transpose, Reshape, Slice, Gather,
   Concat, MaxPool, Max, Min, ReduceMax …) on int8 values with real values are rebuilt on them.
5. A model output with a real value is quantized with the output's scale and zero point, an int8
   model input dequantized once, both as the elementary float ops the GPU backends take
   (``Cast``, ``Sub``, ``Mul``; ``Div``, ``Round``, ``Add``, ``Clip``, ``Cast``), which compute
   what DequantizeLinear and QuantizeLinear do.

Anything else that reads an int8 value keeps reading it (its producer then stays, on the CPU).
Numerics: the outputs differ from the integer model by the rounding it did at every inner
tensor; docs/tflite.md gives the measured distance to LiteRT.

Before::

    %t: (1,3,16,16,i8) = Transpose(data=%image, perm=[0, 3, 1, 2])
    %c: (1,8,8,8,i8) = offload.tflite::Conv(x=%t, w=%w8, b=%b32, x_scale=…, w_scales=[…], …)
    %y: (1,8,8,8,i8) = Transpose(data=%c, perm=[0, 2, 3, 1])

After::

    %f: (1,16,16,3,fp32) = Cast(input=%image, to=1)
    %d: (1,16,16,3,fp32) = Mul(A=Sub(A=%f, B=%x_zero), B=%x_scale)
    %t: (1,3,16,16,fp32) = Transpose(data=%d, perm=[0, 3, 1, 2])
    %c: (1,8,8,8,fp32) = Conv(X=%t, W=%w_real, B=%b_real, …)
    %k: (1,8,8,8,fp32) = Clip(input=%c, min=(y_min - y_zero)·y_scale, max=(y_max - y_zero)·y_scale)
    %y: (1,8,8,8,fp32) = Transpose(data=%k, perm=[0, 2, 3, 1])

and at the model's int8 output ``Cast(Clip(Add(Round(Div(%r, %scale)), %zero), -128, 127), to=INT8)``.
"""

from __future__ import annotations

import numpy as np

from offload.ir import Block, DataType, Operation, Program, TensorType, Value
from offload.ir.tflite_ops import DOMAIN

from ..cleanup.dead_code_elimination import dead_code_elimination
from ..pattern import Rewriter
from ..registry import graph_pass

QUANTIZED = (DataType.INT8, DataType.UINT8, DataType.INT16)
TRANSPARENT = {
    "Transpose",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Slice",
    "Gather",
    "Split",
    "Concat",
    "Identity",
    "MaxPool",
    "Max",
    "Min",
    "ReduceMax",
    "ReduceMin",
    "Expand",
    "Tile",
}
# Lookup's function → the float ops it stands for: (op type, attributes), applied in order
LOOKUP_FORMS: dict[str, list] = {
    "Tanh": [("Tanh", {})],
    "Sigmoid": [("Sigmoid", {})],
    "Exp": [("Exp", {})],
    "Elu": [("Elu", {})],
    "HardSwish": [("HardSwish", {})],
    "Abs": [("Abs", {})],
    "Relu": [("Relu", {})],
    "Identity": [("Identity", {})],
    "Rsqrt": [("Sqrt", {}), ("Reciprocal", {})],
}
LOOKUP_CLIPS = {"Relu6": (0.0, 6.0), "ReluN1To1": (-1.0, 1.0)}


def _quantized(v: Value | None) -> bool:
    return v is not None and isinstance(v.type, TensorType) and v.type.dtype in QUANTIZED


def _float(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.dtype == DataType.FLOAT


class _Floats:
    """The real (float) value of each quantized value, made on demand before ``at``."""

    def __init__(self, rw: Rewriter, block: Block):
        self.rw, self.block = rw, block
        self.real: dict[int, Value] = {}

    def has(self, v: Value | None) -> bool:
        return v is not None and id(v) in self.real

    def of(self, v: Value, at: Operation) -> Value:
        if id(v) in self.real:
            return self.real[id(v)]
        scale, zero = quantization(v)
        if v.const_value is not None:
            real = (v.const_value.astype(np.int64) - zero).astype(np.float32) * np.float32(scale)
            self.real[id(v)] = self.rw.constant(self.block, real.astype(np.float32))
        else:
            self.real[id(v)] = self.dequantized(v, scale, zero, at)
        return self.real[id(v)]

    def saturated(self, x: Value, q: Value, at: Operation) -> Value:
        """``x`` clamped to the real range of ``q``'s integer type: the saturation of the
        quantization dropped here (its rounding is not kept)."""
        scale, zero = quantization(q)
        info = np.iinfo(q.type.dtype.numpy)
        bounds = [self.const((info.min - zero) * scale), self.const((info.max - zero) * scale)]
        return self.build("Clip", [x, *bounds], {}, at)

    def dequantized(self, v: Value, scale: float, zero: int, at: Operation) -> Value:
        """DequantizeLinear as elementary ops the GPU backends take: (float(v) - zp) · scale."""
        x = self.build("Cast", [v], {"to": int(DataType.FLOAT)}, at)
        if zero:
            x = self.build("Sub", [x, self.const(zero)], {}, at)
        return self.build("Mul", [x, self.const(scale)], {}, at)

    def quantized(self, y: Value, scale: float, zero: int, dtype: DataType) -> Value:
        """QuantizeLinear as elementary ops, appended: saturate(round(y / scale) + zp)."""
        info = np.iinfo(dtype.numpy)
        x = self.append("Round", [self.append("Div", [y, self.const(scale)])])
        x = self.append("Add", [x, self.const(zero)]) if zero else x
        x = self.append("Clip", [x, self.const(info.min), self.const(info.max)])
        return self.append("Cast", [x], {"to": int(dtype)})

    def append(self, op_type: str, inputs: list, attrs: dict | None = None) -> Value:
        return self.rw.build(self.block, op_type, inputs, attrs or {}).outputs[0]

    def build(self, op_type: str, inputs: list, attrs: dict, at: Operation, num_outputs: int = 1):
        op = self.rw.build(self.block, op_type, inputs, attrs, before=at, num_outputs=num_outputs)
        return op.outputs[0] if num_outputs == 1 else op.outputs

    def const(self, array) -> Value:
        return self.rw.constant(self.block, np.asarray(array, np.float32))


def quantization(v: Value) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantized value: from its type, the integer op or
    QuantizeLinear that wrote it, or through the data-movement ops before it."""
    while True:
        t = v.type
        if isinstance(t, TensorType) and t.quant is not None and t.quant.scale.size == 1:
            return float(t.quant.scale.reshape(-1)[0]), int(t.quant.zero_point.reshape(-1)[0])
        op = v.producer
        if op is not None and op.domain == DOMAIN:
            return float(op.attributes["y_scale"]), int(op.attributes["y_zero_point"])
        if op is not None and op.op_type == "QuantizeLinear" and not op.domain:
            scale = op.inputs[1].const_value
            zero = op.inputs[2].const_value if len(op.inputs) > 2 and op.inputs[2] is not None else 0
            if scale is not None and zero is not None and scale.size == 1 and np.size(zero) == 1:
                return float(scale.reshape(-1)[0]), int(np.reshape(zero, -1)[0])
        if op is None or op.op_type not in TRANSPARENT or not op.inputs or op.inputs[0] is None:
            raise ValueError(f"{v.name} has no per-tensor scale")
        v = op.inputs[0]


def _clamp(f: _Floats, y: Value, op: Operation, at: Operation) -> Value:
    """The op's output clamp, [y_min, y_max] in real units: the fused activation and the
    saturation of the int8 output in one Clip (a RELU6 on an output of zero point -128 and
    scale 6/255 is the whole int8 range, so both are needed; a mean can exceed its output's
    range, which the int8 model saturates)."""
    a = op.attributes
    lo, hi, scale, zero = a["y_min"], a["y_max"], a["y_scale"], a["y_zero_point"]
    return f.build("Clip", [y, f.const((lo - zero) * scale), f.const((hi - zero) * scale)], {}, at)


def _weights(op: Operation) -> tuple[np.ndarray, np.ndarray | None]:
    a = op.attributes
    w = op.inputs[1].const_value
    scales = np.asarray(a["w_scales"], np.float32)
    w = w.astype(np.float32)
    if a.get("w_zero_point"):  # uint8 weights
        w = w - np.float32(a["w_zero_point"])
    real_w = (w * scales.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    b = op.inputs[2] if len(op.inputs) > 2 else None
    real_b = None
    if b is not None:
        real_b = (b.const_value.astype(np.float32) * (np.float32(a["x_scale"]) * scales)).astype(np.float32)
    return real_w, real_b


def _attrs(op: Operation, *keys: str) -> dict:
    return {k: op.attributes[k] for k in keys if op.attributes.get(k) is not None}


def _conv(f: _Floats, op: Operation, x: list) -> Value:
    w, b = _weights(op)
    attrs = _attrs(op, "auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    return f.build("Conv", [x[0], f.const(w)] + ([f.const(b)] if b is not None else []), attrs, op)


def _fully_connected(f: _Floats, op: Operation, x: list) -> Value:
    w, b = _weights(op)
    y = f.build("MatMul", [x[0], f.const(np.ascontiguousarray(w.T))], {}, op)
    return f.build("Add", [y, f.const(b)], {}, op) if b is not None else y


def _squared_difference(f: _Floats, op: Operation, x: list) -> Value:
    d = f.build("Sub", x, {}, op)
    return f.build("Mul", [d, d], {}, op)


def _average_pool(f: _Floats, op: Operation, x: list) -> Value:
    attrs = _attrs(op, "auto_pad", "kernel_shape", "pads", "strides")
    return f.build("AveragePool", x, {**attrs, "count_include_pad": 0}, op)


def _reduce(onnx_op: str):
    def build(f: _Floats, op: Operation, x: list) -> Value:
        return f.build(onnx_op, [x[0], op.inputs[1]], {"keepdims": op.attributes["keepdims"]}, op)

    return build


def _resize_bilinear(f: _Floats, op: Operation, x: list) -> Value:
    mode = op.attributes["coordinate_transformation_mode"]
    attrs = {"mode": "linear", "coordinate_transformation_mode": mode, "axes": [1, 2]}
    return f.build("Resize", [x[0], None, None, op.inputs[1]], attrs, op)


def _lookup(f: _Floats, op: Operation, x: list) -> Value | None:
    function = op.attributes["function"]
    if function == "LeakyRelu":
        return f.build("LeakyRelu", x, {"alpha": float(op.attributes["alpha"])}, op)
    if function in LOOKUP_CLIPS:
        lo, hi = LOOKUP_CLIPS[function]
        return f.build("Clip", [x[0], f.const(lo), f.const(hi)], {}, op)
    if function not in LOOKUP_FORMS:
        return None
    y = x[0]
    for op_type, attrs in LOOKUP_FORMS[function]:
        y = f.build(op_type, [y], attrs, op)
    return y


def _same(onnx_op: str):
    def build(f: _Floats, op: Operation, x: list) -> Value:
        return f.build(onnx_op, x, {}, op)

    return build


# integer op → (how many leading inputs are activations, its float form on their real values)
FLOAT_FORMS = {
    "Conv": (1, _conv),
    "FullyConnected": (1, _fully_connected),
    **{op: (2, _same(op)) for op in ("Add", "Sub", "Mul", "Div")},
    "SquaredDifference": (2, _squared_difference),
    "AveragePool": (1, _average_pool),
    "Mean": (1, _reduce("ReduceMean")),
    "Sum": (1, _reduce("ReduceSum")),
    "ResizeBilinear": (1, _resize_bilinear),
    "Lookup": (1, _lookup),
}


def float_form(f: _Floats, op: Operation) -> Value | None:
    """``op``'s float form (``FLOAT_FORMS``) on the real values of its activations, built before
    ``op``, then clamped to its output's real range; None for an op it cannot rewrite."""
    form = FLOAT_FORMS.get(op.op_type)
    weights = op.inputs[1] if op.op_type in ("Conv", "FullyConnected") else None
    if form is None or (weights is not None and weights.const_value is None):
        return None
    count, build = form
    y = build(f, op, [f.of(v, op) for v in op.inputs[:count]])
    return None if y is None else _clamp(f, y, op, op)


def _scaled(v: Value | None) -> bool:
    """Whether ``v`` is a quantized value whose per-tensor scale is known."""
    if not _quantized(v):
        return False
    try:
        quantization(v)
    except ValueError:
        return False
    return True


def _transparent(f: _Floats, op: Operation) -> bool:
    """Rule 4: ``op`` rebuilt on the real values of its quantized inputs."""
    if op.op_type not in TRANSPARENT or op.domain or op.blocks:
        return False
    quantized = [v for v in op.inputs if _quantized(v)]
    if not quantized or not all(f.has(v) or _scaled(v) for v in quantized):
        return False  # plain integers (indices, an int8 model without scales)
    if not all(_quantized(o) for o in op.outputs):
        return False
    ins = [f.of(v, op) if _quantized(v) else v for v in op.inputs]
    outs = f.build(op.op_type, ins, dict(op.attributes), op, num_outputs=len(op.outputs))
    for old, new in zip(op.outputs, outs if isinstance(outs, list) else [outs]):
        f.real[id(old)] = new
    return True


def _rewrite_block(rw: Rewriter, block: Block) -> bool:
    f = _Floats(rw, block)
    changed = False
    for op in list(block.operations):
        if op.domain == DOMAIN:
            y = float_form(f, op)
            if y is not None:
                f.real[id(op.outputs[0])] = y
                changed = True
        elif op.op_type == "QuantizeLinear" and not op.domain and _scaled(op.outputs[0]):
            x = op.inputs[0]
            if _float(x):
                f.real[id(op.outputs[0])] = f.saturated(x, op.outputs[0], op)
                changed = True
        elif op.op_type == "DequantizeLinear" and not op.domain:
            x = op.inputs[0]
            if f.has(x) and _float(f.real[id(x)]) and _float(op.outputs[0]):
                changed |= rw.substitute(op.outputs[0], f.real[id(x)], block)
            elif not f.has(x) and _scaled(x) and _float(op.outputs[0]):
                changed |= rw.substitute(op.outputs[0], f.of(x, op), block)  # a model input's
        else:
            changed |= _transparent(f, op)
    for v in list(block.outputs):
        if not f.has(v) or f.real[id(v)] is v:
            continue
        q = f.quantized(f.real[id(v)], *quantization(v), v.type.dtype)
        q.type = v.type
        rw.substitute(v, q, block)
        changed = True
    return changed


def applies(program: Program, body: Block) -> bool:
    """A function of a TFLite model (TFLite's quantization is the model's own, to be dropped
    on a float backend), or one holding ``offload.tflite`` integer ops. An ONNX model's
    Quantize/Dequantize pairs are left alone: there they are the semantics asked for."""
    fmt = program.metadata.get("format", "")
    return (
        fmt == "tflite" or fmt.startswith("nnpackage") or any(op.domain == DOMAIN for op in body.operations)
    )


@graph_pass("quantization::integer_as_float")
def integer_as_float(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for fn in program.functions.values():
        if applies(program, fn.body):
            changed |= _rewrite_block(rw, fn.body)
    if changed:
        dead_code_elimination(program)
    return changed
