"""Reference execution of an IR program on the CPU kernels, one operation at a time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from offload.errors import UnsupportedOpError
from offload.ir import Block, Operation, Program, Value, attributes_of

from . import kernels
from .inputs import check_inputs

Observer = Callable[[Value, Any], None]


class KernelContext:
    """What a kernel may ask beyond its inputs: its op, how many outputs, nested blocks."""

    __slots__ = ("_env", "num_outputs", "op")

    def __init__(self, op: Operation, env: _Env):
        self.op = op
        self.num_outputs = len(op.outputs)
        self._env = env

    def output_wanted(self, i: int) -> bool:
        return i < self.num_outputs and bool(self.op.outputs[i].name)

    def out(self, i: int) -> None:
        """A preallocated buffer for output ``i``: the evaluator has none (a .pte Method does)."""
        return None

    def run_block(self, block: Block, args: list) -> list:
        """Run a nested block (If branch, Loop/Scan body) with these parameter values."""
        return _run_block(block, args, _Env(self._env))


class _Env:
    """Values computed so far; a nested block's environment reads through to its parent's.
    ``observe`` (inherited by nested blocks) is called with every op output and its array."""

    __slots__ = ("observe", "parent", "values")

    def __init__(self, parent: _Env | None = None, observe: Observer | None = None):
        self.values: dict[int, Any] = {}
        self.parent = parent
        self.observe = parent.observe if parent is not None else observe

    def get(self, v):
        e = self
        key = id(v)
        while e is not None:
            if key in e.values:
                return e.values[key]
            e = e.parent
        raise KeyError(v.name)


def _missing_kernels(block: Block) -> list[Operation]:
    return [op for op in block.walk() if kernels.find(op.domain, op.op_type) is None]


def _call(op: Operation, env: _Env) -> None:
    fn = kernels.find(op.domain, op.op_type)
    args = [None if v is None else env.get(v) for v in op.inputs]
    attrs = attributes_of(op)
    what = f"op '{op.name or op.op_type}' ({op.qualified_type})"
    result = kernels.invoke(fn, KernelContext(op, env), args, attrs, what)
    for out, value in zip(op.outputs, result):
        env.values[id(out)] = value
        if env.observe is not None and out is not None:
            env.observe(out, value)


def _run_block(block: Block, args: list, env: _Env) -> list:
    for v in block.constants.values():
        env.values[id(v)] = v.const_value
    for v, a in zip(block.inputs, args):
        env.values[id(v)] = a
    for op in block.operations:
        _call(op, env)
    return [env.get(v) for v in block.outputs]


def evaluate(
    program: Program, inputs: Mapping[str, Any], function: str | None = None, observe: Observer | None = None
) -> dict[str, Any]:
    """Run one function of a program (its first by default) on the CPU kernels; ``observe``,
    when given, is called with each op output (a ``Value``) and its array as they are made,
    inside If branches and loop bodies too (``offload.calibrate`` records ranges this way)."""
    fn = program.functions[function] if function else program.main
    missing = _missing_kernels(fn.body)
    if missing:
        names = sorted({op.qualified_type for op in missing})
        raise UnsupportedOpError(
            f"{program.source or 'program'}: no CPU kernel for {', '.join(names)}; "
            "these ops cannot run in this version of offload"
        )
    args = check_inputs([(v.name, v.type) for v in fn.inputs], inputs)
    results = _run_block(fn.body, args, _Env(observe=observe))
    return {v.name: r for v, r in zip(fn.outputs, results)}
