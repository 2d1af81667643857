"""One MIL operation as a translation rule sees it, and the registry of rules.

A MIL operation has named inputs (``x``, ``weight``, ``pad_type`` …), each bound to a value by
name or given inline, and typed named outputs. A rule (``@rule("conv")``) reads them through a
``Node``: ``node.x("x")`` is an IR value, ``node.const("strides")`` a numpy array known at import
(a ``const`` op's value, or an inline value), ``node.values("values")`` the list of a variadic
input, ``node.out(i)`` the type MIL declares for output ``i``. A rule returns one IR value per MIL
output, built with ``node.op`` / ``node.one``; any MIL input a rule cannot take is an
``UnsupportedOpError`` naming the op and the input (``node.unsupported``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType, TensorType, Value

_REQUIRED = object()


@dataclass
class Const:
    """A value known at import: a ``const`` op's output or an inline argument."""

    array: np.ndarray
    dtype: DataType  # the MIL type (the array may hold it widened, e.g. unpacked int4)


Rule = Callable[["Node"], list]
RULES: dict[str, Rule] = {}
OPSETS: dict[str, str] = {}  # op → the oldest opset it was written against (docs/coreml.md)


def rule(*names: str, since: str = "iOS15"):
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
            OPSETS[name] = since
        return fn

    return register


class Node:
    """The MIL operation being translated: its bindings, output types and the builder."""

    def __init__(self, imp, op, index: int, scope):
        self.imp, self.proto, self.index, self.scope = imp, op, index, scope
        self.type: str = op.type
        self.outputs = [
            imp.value_type(o.type, f"{self.where}.outputs[{k}]") for k, o in enumerate(op.outputs)
        ]
        self.out_names = [o.name for o in op.outputs]

    @property
    def where(self) -> str:
        name = self.proto.outputs[0].name if len(self.proto.outputs) else ""
        return f"op {self.index} ({self.proto.type} '{name}')"

    def fail(self, what: str) -> ModelFormatError:
        return self.imp.fail(f"{self.where}: {what}")

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.imp.origin}: {self.where}: {what}")

    # ---- inputs ------------------------------------------------------------------------------

    def has(self, name: str) -> bool:
        return name in self.proto.inputs and len(self.proto.inputs[name].arguments) > 0

    def _bindings(self, name: str) -> list:
        if not self.has(name):
            raise self.fail(f"has no input '{name}'")
        return [
            self.imp.binding(b, self.scope, f"{self.where}.{name}") for b in self.proto.inputs[name].arguments
        ]

    def _one(self, name: str):
        bound = self._bindings(name)
        if len(bound) != 1:
            raise self.fail(f"input '{name}' binds {len(bound)} values, not one")
        return bound[0]

    def x(self, name: str) -> Value:
        """Input ``name`` as an IR value (a constant becomes a block constant)."""
        return self.imp.as_value(self._one(name))

    def maybe(self, name: str) -> Value | None:
        return self.x(name) if self.has(name) else None

    def values(self, name: str) -> list[Value]:
        """A variadic input's values (concat's ``values``, …)."""
        return [self.imp.as_value(b) for b in self._bindings(name)]

    def is_const(self, name: str) -> bool:
        return self.has(name) and isinstance(self._one(name), Const)

    def const(self, name: str, default=_REQUIRED) -> np.ndarray:
        """Input ``name``'s value, which must be known at import; ``default`` when absent."""
        if not self.has(name):
            if default is _REQUIRED:
                raise self.fail(f"has no input '{name}'")
            return default
        b = self._one(name)
        if not isinstance(b, Const):
            raise self.unsupported(f"input '{name}' must be known when the model is loaded here")
        return b.array

    def scalar(self, name: str, default=_REQUIRED):
        """A one-value input as a Python scalar (bool, int, float or str)."""
        v = self.const(name, default)
        if v is default:
            return v
        a = np.asarray(v)
        if a.size != 1:
            raise self.fail(f"input '{name}' holds {a.size} values, not one")
        return a.reshape(-1)[0].item() if a.dtype != object else str(a.reshape(-1)[0])

    def ints(self, name: str, default=_REQUIRED) -> list[int] | None:
        v = self.const(name, default)
        return v if v is default or v is None else [int(i) for i in np.asarray(v).reshape(-1)]

    def dtype(self, name: str) -> DataType:
        """The element type of input ``name``."""
        b = self._one(name)
        if isinstance(b, Const):
            return b.dtype
        if not isinstance(b.type, TensorType):
            raise self.fail(f"input '{name}' is not a tensor")
        return b.type.dtype

    def shape(self, name: str) -> tuple | None:
        """Input ``name``'s shape as MIL declares it (symbolic dims as names), None if unknown."""
        b = self._one(name)
        if isinstance(b, Const):
            return tuple(b.array.shape)
        return b.type.shape if isinstance(b.type, TensorType) else None

    def rank(self, name: str) -> int:
        shape = self.shape(name)
        if shape is None:
            raise self.unsupported(f"input '{name}' has an unknown rank")
        return len(shape)

    def out(self, i: int = 0) -> TensorType:
        if i >= len(self.outputs):
            raise self.fail(f"has no output {i}")
        return self.outputs[i]

    # ---- building ----------------------------------------------------------------------------

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1) -> list[Value]:
        return self.imp.op(op_type, inputs, attrs, num_outputs)

    def one(self, op_type: str, inputs, attrs=None) -> Value:
        return self.op(op_type, inputs, attrs)[0]

    def int64s(self, values) -> Value:
        """A constant int64 tensor (shapes, axes, pads …)."""
        return self.imp.const(np.asarray(values, dtype=np.int64))

    def full(self, value, like: DataType | Value) -> Value:
        """A constant scalar of the element type of ``like``."""
        dtype = like.type.dtype if isinstance(like, Value) else like
        return self.imp.const(np.asarray(value, dtype=dtype.numpy))

    def cast(self, v: Value, dtype: DataType) -> Value:
        return self.one("Cast", [v], {"to": int(dtype)})
