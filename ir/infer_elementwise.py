"""Inference rules of elementwise ops: unary, broadcast binary, casts, random draws."""

from __future__ import annotations

from .infer_dims import _attr_dtype, _axis, _dtype, _shape, _tensor, _tt, _type, broadcast_shapes
from .registry import inference
from .types import DataType, TensorType

# One output with exactly the type of the first input (extra inputs do not change it).
SAME_AS_INPUT = [
    "Abs",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "CumProd",
    "CumSum",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "Identity",
    "InstanceNormalization",
    "LRN",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LpNormalization",
    "MeanVarianceNormalization",
    "Mish",
    "Neg",
    "Not",
    "BitwiseNot",
    "RMSNormalization",
    "Reciprocal",
    "Relu",
    "ReverseSequence",
    "RotaryEmbedding",
    "Round",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Swish",
    "Tan",
    "Tanh",
    "TensorScatter",
    "ThresholdedRelu",
    "Trilu",
    "SwiGLU",
]
# Elementwise over broadcast inputs, keeping the first input's element type.
BROADCAST_SAME = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "PRelu",
    "Max",
    "Min",
    "Mean",
    "Sum",
    "And",
    "Or",
    "Xor",
    "StringConcat",
]
# Elementwise over broadcast inputs, producing bool.
BROADCAST_BOOL = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]
# Same shape as the input, bool elements.
BOOL_SAME_SHAPE = ["IsNaN", "IsInf", "RegexFullMatch"]


@inference(*SAME_AS_INPUT)
def _same_as_input(op, attrs):
    return [_type(op, 0)]


@inference(*BROADCAST_SAME)
def _broadcast_same(op, attrs):
    shapes = [_shape(op, i) for i in range(len(op.inputs))]
    return [_tt(_dtype(op, 0), broadcast_shapes(*shapes))]


@inference(*BROADCAST_BOOL)
def _broadcast_bool(op, attrs):
    if _tensor(op, 0) is None or _tensor(op, 1) is None:
        return [None]
    return [_tt(DataType.BOOL, broadcast_shapes(_shape(op, 0), _shape(op, 1)))]


@inference(*BOOL_SAME_SHAPE)
def _bool_same_shape(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else TensorType(DataType.BOOL, t.shape)]


@inference("Where")
def _where(op, attrs):
    shapes = [_shape(op, i) for i in range(3)]
    return [_tt(_dtype(op, 1) or _dtype(op, 2), broadcast_shapes(*shapes))]


@inference("Cast")
def _cast(op, attrs):
    t = _tensor(op, 0)
    to = _attr_dtype(attrs.get("to"), None)
    return [None if t is None or to is None else TensorType(to, t.shape)]


@inference("BitCast")
def _bitcast(op, attrs):
    return _cast(op, attrs)


@inference("CastLike")
def _cast_like(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else _tt(_dtype(op, 1), t.shape)]


@inference("Dropout")
def _dropout(op, attrs):
    t = _tensor(op, 0)
    return [t, None if t is None else TensorType(DataType.BOOL, t.shape)]


@inference("BatchNormalization")
def _batch_norm(op, attrs):
    return [_type(op, 0), _type(op, 3), _type(op, 4)]


@inference("LayerNormalization")
def _layer_norm(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    stats = None
    if t.shape is not None:
        axis = _axis(attrs.get("axis", -1), len(t.shape))
        if axis is not None:
            stats = t.shape[:axis] + (1,) * (len(t.shape) - axis)
    stash = _attr_dtype(attrs.get("stash_type"), DataType.FLOAT)
    return [t, _tt(stash, stats), _tt(stash, stats)]


@inference("RandomNormalLike", "RandomUniformLike", "Bernoulli", "EyeLike")
def _like(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else TensorType(_attr_dtype(attrs.get("dtype"), t.dtype), t.shape)]


@inference("RandomNormal", "RandomUniform")
def _random(op, attrs):
    shape = attrs.get("shape")
    return [_tt(_attr_dtype(attrs.get("dtype"), DataType.FLOAT), None if shape is None else list(shape))]


@inference("Multinomial")
def _multinomial(op, attrs):
    s = _shape(op, 0)
    shape = None if s is None else (s[0], attrs.get("sample_size", 1))
    return [_tt(_attr_dtype(attrs.get("dtype"), DataType.INT32), shape)]
