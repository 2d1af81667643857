"""One TFLite operator as a rule sees it, the registry of rules, and the helpers rules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import (
    DataType,
    Value,
)
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_reader import Table

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min

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

    imp: Any  # the importer (tflite._Importer)
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
# Helpers of the rules.


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
