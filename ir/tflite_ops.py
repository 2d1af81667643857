"""TFLite's integer operators (domain ``offload.tflite``): their schemas and type inference.

Each op computes one full-integer TFLite operator on int8 (or uint8) tensors the way LiteRT's
CPU does (runtime/kernels/tflite_int8.py says which arithmetic). The quantization of every activation
is an attribute (``x_scale``/``x_zero_point``, ``a_…``/``b_…``, ``y_…``), so an op is
self-contained: its result type is its first input's (int8 or uint8) with the output's ``QuantParams``, and the GPU lowering
(passes/quantization/integer_as_float.py) rewrites it to its float operator from the attributes
alone. ``y_min``/``y_max`` are the fused activation's clamp in output units; ``w_zero_point`` is
the zero point of uint8 weights (int8 weights are symmetric).
"""

from __future__ import annotations

import numpy as np

from .infer_dims import _ints_value, _shape, broadcast_shapes
from .infer_nn import _conv_shape, _pool_shape
from .infer_reduction import _reduced
from .registry import inference, parse_schema_line, register, register_shape_rules
from .types import DataType, QuantParams, TensorType

DOMAIN = "offload.tflite"

_OUT = "y_scale: float!, y_zero_point: int!, y_min: int = -128, y_max: int = 127"
_BINARY = f"a_scale: float!, a_zero_point: int!, b_scale: float!, b_zero_point: int!, {_OUT}"
_LINEAR = f"x_scale: float!, x_zero_point: int!, w_scales: floats!, w_zero_point: int = 0, {_OUT}"
_WINDOW = "auto_pad: str = 'NOTSET', kernel_shape: ints, pads: ints, strides: ints"

SCHEMAS = f"""
Conv(x, w, b?) -> y  | {_WINDOW}, dilations: ints, group: int = 1, {_LINEAR}  @1
FullyConnected(x, w, b?) -> y  | {_LINEAR}  @1
Add(a, b) -> y  | {_BINARY}  @1
Sub(a, b) -> y  | {_BINARY}  @1
Mul(a, b) -> y  | {_BINARY}  @1
Div(a, b) -> y  | {_BINARY}  @1
SquaredDifference(a, b) -> y  | {_BINARY}  @1
AveragePool(x) -> y  | {_WINDOW}, {_OUT}  @1
Mean(x, axes) -> y  | keepdims: int = 1, x_scale: float!, x_zero_point: int!, {_OUT}  @1
Sum(x, axes) -> y  | keepdims: int = 1, x_scale: float!, x_zero_point: int!, {_OUT}  @1
ResizeBilinear(x, sizes) -> y  | coordinate_transformation_mode: str!, {_OUT}  @1
Lookup(x, table) -> y  | function: str!, alpha: float = 0.0, x_scale: float!, x_zero_point: int!, {_OUT}  @1
"""

for _line in SCHEMAS.strip().splitlines():
    register(parse_schema_line(DOMAIN, _line))

# Output shapes from input shapes (and the values of Mean's and Sum's axes, ResizeBilinear's
# sizes), as the inference functions below compute them.
register_shape_rules(
    DOMAIN,
    frozenset(
        {"Conv", "FullyConnected", "Add", "Sub", "Mul", "Div", "SquaredDifference", "AveragePool", "Lookup"}
    ),
    {"Mean": (1,), "Sum": (1,), "ResizeBilinear": (1,)},
)


def _int8(shape, attrs, op=None) -> TensorType:
    """int8, or uint8 where the op's first input is uint8, with the output's quantization."""
    quant = QuantParams(np.array([attrs["y_scale"]], np.float32), np.array([attrs["y_zero_point"]], np.int64))
    first = getattr(op.inputs[0], "type", None) if op is not None and op.inputs else None
    dtype = DataType.UINT8 if getattr(first, "dtype", None) == DataType.UINT8 else DataType.INT8
    return TensorType(dtype, None if shape is None else tuple(shape), quant)


@inference("Conv", domain=DOMAIN)
def _conv(op, attrs):
    return [_int8(_conv_shape(_shape(op, 0), _shape(op, 1), attrs), attrs, op)]


@inference("FullyConnected", domain=DOMAIN)
def _fully_connected(op, attrs):
    x, w = _shape(op, 0), _shape(op, 1)
    return [_int8(None if x is None or w is None else (*x[:-1], w[0]), attrs, op)]


@inference("Add", "Sub", "Mul", "Div", "SquaredDifference", domain=DOMAIN)
def _binary(op, attrs):
    return [_int8(broadcast_shapes(_shape(op, 0), _shape(op, 1)), attrs, op)]


@inference("AveragePool", domain=DOMAIN)
def _average_pool(op, attrs):
    return [_int8(_pool_shape(op, {**attrs, "dilations": None, "ceil_mode": 0}), attrs, op)]


@inference("Mean", "Sum", domain=DOMAIN)
def _reduce(op, attrs):
    axes = _ints_value(op, 1)
    shape = None if axes is None else _reduced(_shape(op, 0), axes, bool(attrs["keepdims"]))
    return [_int8(shape, attrs, op)]


@inference("ResizeBilinear", domain=DOMAIN)
def _resize_bilinear(op, attrs):
    x, sizes = _shape(op, 0), _ints_value(op, 1)
    ok = x is not None and len(x) == 4 and sizes is not None and len(sizes) == 2
    return [_int8((x[0], *sizes, x[3]) if ok else None, attrs, op)]


@inference("Lookup", domain=DOMAIN)
def _lookup(op, attrs):
    return [_int8(_shape(op, 0), attrs, op)]
