"""Program → Function → Block → Operation, over SSA Values that know their producer and users."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .types import TensorType, ValueType


class Value:
    """One SSA value: produced by one operation (or a block parameter / constant), used by many."""

    __slots__ = ("__weakref__", "_uses", "const_value", "index", "name", "producer", "type")

    def __init__(self, name: str, type: ValueType | None = None, const_value: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer: Operation | None = None
        self.index = 0
        self.const_value = const_value
        self._uses: dict[tuple[int, int], tuple[Operation, int]] = {}

    @property
    def uses(self) -> list[tuple[Operation, int]]:
        """(operation, input index) pairs that read this value, in insertion order."""
        return list(self._uses.values())

    @property
    def users(self) -> list[Operation]:
        seen: dict[int, Operation] = {}
        for op, _ in self._uses.values():
            seen.setdefault(id(op), op)
        return list(seen.values())

    @property
    def is_constant(self) -> bool:
        return self.const_value is not None

    def replace_all_uses_with(self, other: Value) -> None:
        for op, i in self.uses:
            op.set_input(i, other)

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


Attribute = Any  # int | float | str | np.ndarray | Block | list of those | ValueType


class Operation:
    """One operator application: inputs (None for an omitted optional), attributes, outputs."""

    def __init__(
        self,
        op_type: str,
        inputs: list[Value | None],
        attributes: dict[str, Attribute] | None = None,
        num_outputs: int = 1,
        domain: str = "",
        name: str = "",
        output_names: list[str] | None = None,
    ):
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.block: Block | None = None
        self._inputs: list[Value | None] = []
        for v in inputs:
            self._inputs.append(None)
            self.set_input(len(self._inputs) - 1, v)
        names = output_names or [f"{name or op_type}_out{i}" for i in range(num_outputs)]
        self.outputs: list[Value] = []
        for i, n in enumerate(names):
            out = Value(n)
            out.producer, out.index = self, i
            self.outputs.append(out)
        for b in self.blocks:
            b.parent = self

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    def set_input(self, i: int, v: Value | None) -> None:
        old = self._inputs[i]
        if old is not None:
            old._uses.pop((id(self), i), None)
        self._inputs[i] = v
        if v is not None:
            v._uses[(id(self), i)] = (self, i)

    def drop_inputs(self) -> None:
        for i in range(len(self._inputs)):
            self.set_input(i, None)

    @property
    def qualified_type(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    @property
    def blocks(self) -> list[Block]:
        """Nested blocks held by graph attributes (If branches, Loop/Scan bodies)."""
        out = []
        for a in self.attributes.values():
            if isinstance(a, Block):
                out.append(a)
            elif isinstance(a, list) and a and isinstance(a[0], Block):  # a GRAPHS attribute
                out.extend(x for x in a if isinstance(x, Block))
        return out

    def __repr__(self) -> str:
        return f"<Operation {self.qualified_type} {self.name!r}>"


@dataclass(eq=False)
class Block:
    """A region of straight-line SSA code: parameters, operations in order, results.

    A nested block (a branch or loop body) may read values of the blocks that enclose it.
    """

    name: str = ""
    inputs: list[Value] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    constants: dict[str, Value] = field(default_factory=dict)
    parent: Operation | None = None

    def append(self, op: Operation) -> Operation:
        op.block = self
        self.operations.append(op)
        return op

    def add_constant(self, name: str, array: np.ndarray) -> Value:
        from .types import DataType

        v = Value(name, TensorType(DataType.from_numpy(array.dtype), tuple(array.shape)), array)
        self.constants[name] = v
        return v

    def remove(self, op: Operation) -> None:
        """Detach an operation whose outputs are no longer used."""
        for out in op.outputs:
            if out._uses:
                raise ValueError(f"cannot remove {op}: output {out.name} still has users")
        op.drop_inputs()
        self.operations.remove(op)
        op.block = None

    def walk(self) -> Iterator[Operation]:
        """Every operation of this block and of the blocks nested in it, in program order."""
        for op in self.operations:
            yield op
            for b in op.blocks:
                yield from b.walk()


@dataclass(eq=False)
class Function:
    """A named entry point: one top-level block.

    ``states`` names the inputs that are state (Core ML ``state``, TFLite resource variables):
    the last ``len(states)`` outputs are their values after a call, in the same order. The IR is
    functional; a loaded module keeps each state between runs and feeds it back (runtime.Module).
    """

    name: str
    body: Block
    opset_imports: dict[str, int] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)

    @property
    def inputs(self) -> list[Value]:
        return self.body.inputs

    @property
    def outputs(self) -> list[Value]:
        return self.body.outputs


@dataclass(eq=False)
class Program:
    """A whole model: functions by name (``main`` first) and model metadata."""

    functions: dict[str, Function] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def main(self) -> Function:
        return next(iter(self.functions.values()))
