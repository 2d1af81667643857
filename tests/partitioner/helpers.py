"""Fake backends and a tiny graph builder for the partitioner tests."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from offload.delegates.backend import BackendCompiler, PreprocessResult, Support
from offload.ir import Block, DataType, Function, Operation, Program, TensorType, Value

F32 = TensorType(DataType.FLOAT, (2, 3))


class FakeBackend(BackendCompiler):
    """Takes the op types it is given; its blob lists the ops of the partition."""

    spec_keys: ClassVar[dict[str, str]] = {"level": "an integer"}

    def __init__(self, name: str, op_types):
        self.name = name
        self.op_types = set(op_types)
        self.calls: list[tuple[Program, list]] = []

    def supports(self, op, ctx=None) -> Support:
        if op.op_type in self.op_types:
            return Support(True)
        return Support(False, f"{self.name} does not do {op.op_type}")

    def preprocess(self, subprogram, compile_specs):
        self.calls.append((subprogram, list(compile_specs)))
        ops = ",".join(op.op_type for op in subprogram.main.body.operations)
        return PreprocessResult(f"{self.name}:{ops}".encode())


def build(nodes, outputs, inputs=("x",), constants=None):
    """A program from (name, op_type, [input names]) triples; every value is float[2,3]."""
    values = {n: Value(n, F32) for n in inputs}
    body = Block("main", inputs=[values[n] for n in inputs])
    for name, array in (constants or {}).items():
        values[name] = body.add_constant(name, np.asarray(array, np.float32))
    for name, op_type, args in nodes:
        op = body.append(Operation(op_type, [values[a] for a in args], name=name, output_names=[name]))
        op.outputs[0].type = F32
        values[name] = op.outputs[0]
    body.outputs = [values[n] for n in outputs]
    return Program({"main": Function("main", body, {"": 21})})


def groups(report) -> list[set[str]]:
    """Each partition as the set of its op names, in partition order."""
    return [{op.name for op in part.ops} for part in report.partitions]


def placement(report, name):
    return next(p for p in report.placements if p.op.name == name)
