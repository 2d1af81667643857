"""What passes share for matching and rewriting: the blocks of a program, constant tests,
single-user checks that see block results, and one ``Rewriter`` per pass run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np

from offload.ir import Block, Namer, Operation, Program, TensorType, Value, build, substitute
from offload.ir.rewrite import add_constant


def blocks(block: Block) -> Iterator[Block]:
    """``block`` and every block nested in it."""
    yield block
    for op in block.walk():
        yield from op.blocks


def name_counts(block: Block) -> Counter:
    """How many values of ``block`` and the blocks nested in it have each name."""
    counts: Counter = Counter()
    for b in blocks(block):
        counts.update(list(b.constants))
        counts.update(v.name for v in b.inputs)
        counts.update(v.name for op in b.operations for v in op.outputs if v is not None)
    return counts


def const(v: Value | None) -> np.ndarray | None:
    """The value of ``v`` when it is a constant."""
    return None if v is None else v.const_value


def scalar(v: Value | None) -> float | None:
    """The one number a constant holds (every element equal, at most 1 element in total or a
    splat), as a Python float; None otherwise."""
    a = const(v)
    if a is None or a.size == 0 or a.dtype.kind not in "fiub":
        return None
    flat = a.reshape(-1)
    if a.size > 1 and not np.all(flat == flat[0]):
        return None
    return float(flat[0])


def is_float(v: Value | None) -> bool:
    t = None if v is None else v.type
    return isinstance(t, TensorType) and t.dtype.numpy.kind == "f"


def same_type(a: Value, b: Value) -> bool:
    """Both typed tensors of one dtype and one shape known to be the same: every dim a number or
    a symbol (a symbol is one size wherever it appears, as ONNX's ``dim_param``; an unknown dim
    equals nothing)."""
    ta, tb = a.type, b.type
    return (
        isinstance(ta, TensorType)
        and isinstance(tb, TensorType)
        and ta.shape is not None
        and all(d is not None for d in ta.shape)
        and ta == tb
    )


def same_dtype(a: Value, b: Value) -> bool:
    """Both typed tensors of one dtype, whatever their shapes."""
    ta, tb = a.type, b.type
    return isinstance(ta, TensorType) and isinstance(tb, TensorType) and ta.dtype == tb.dtype


def keeps_shape(x: Value, result: Value, ops) -> bool:
    """A chain of elementwise ``ops`` from ``x`` to ``result`` leaves x's shape: ``same_type``
    says so, or the two have one dtype and rank and every constant operand of the ops holds one
    element in no more dims than x (broadcasting then grows nothing, unknown dims included)."""
    if same_type(x, result):
        return True
    r = rank(x)
    if r is None or not same_dtype(x, result) or rank(result) != r:
        return False
    for op in ops:
        for v in op.inputs:
            a = const(v)
            if a is not None and (a.size != 1 or a.ndim > r):
                return False
    return True


def static_shape(v: Value | None) -> tuple[int, ...] | None:
    t = None if v is None else v.type
    return tuple(t.shape) if isinstance(t, TensorType) and t.is_static else None


def rank(v: Value | None) -> int | None:
    t = None if v is None else v.type
    return t.rank if isinstance(t, TensorType) else None


def other_input(op: Operation, v: Value) -> Value | None:
    """For a binary op reading ``v``, the other operand."""
    a, b = op.inputs[0], op.inputs[1]
    return b if a is v else a if b is v else None


def _defines(block: Block, v: Value) -> bool:
    """``v`` is a parameter, a constant or an op result of ``block`` itself."""
    if v.producer is not None:
        return v.producer.block is block
    return any(p is v for p in block.inputs) or block.constants.get(v.name) is v


class Rewriter:
    """The edits of one pass run over one program: fresh names, block results, replacing."""

    def __init__(self, program: Program):
        self.program = program
        self._namer: Namer | None = None
        self._returned: set[int] | None = None

    @property
    def namer(self) -> Namer:
        if self._namer is None:
            self._namer = Namer(self.program)
        return self._namer

    def blocks(self) -> list[Block]:
        return [b for fn in self.program.functions.values() for b in blocks(fn.body)]

    def ops(self) -> list[tuple[Block, Operation]]:
        """Every (block, op) pair, a snapshot: rewrites while iterating are safe."""
        return [(b, op) for b in self.blocks() for op in list(b.operations)]

    def returned(self, v: Value) -> bool:
        """Whether some block returns ``v`` (a function output, a branch or body result)."""
        if self._returned is None:
            self._returned = {id(x) for b in self.blocks() for x in b.outputs}
        return id(v) in self._returned

    def only_user(self, v: Value) -> Operation | None:
        """The op that alone reads ``v`` (once), when no block returns ``v``."""
        uses = v.uses
        if len(uses) != 1 or self.returned(v):
            return None
        return uses[0][0]

    def alive(self, op: Operation) -> bool:
        return op.block is not None

    def substitute(self, old: Value, new: Value, block: Block | None = None) -> bool:
        """ir.substitute, keeping this run's record of block results right. False (nothing
        changed) also where a nested block (a branch or loop body) returns ``old`` and ``new``
        is defined outside it: such a block would return a value it only captures, which the
        verifier allows but the partitioner's lowering does not carry into a delegate."""
        if not self.returned(old):  # no block result to rename or rewrite: the use-lists alone
            old.replace_all_uses_with(new)
            return True
        if any(
            b.parent is not None and any(v is old for v in b.outputs) and not _defines(b, new)
            for b in self.blocks()
        ):
            return False
        done = substitute(old, new, block)
        self._returned = None
        return done

    def build(self, block: Block, op_type: str, inputs, attributes=None, **kw) -> Operation:
        return build(block, op_type, inputs, attributes, namer=self.namer, **kw)

    def constant(self, block: Block, array: np.ndarray, stem: str = "const") -> Value:
        return add_constant(block, array, namer=self.namer, stem=stem)

    def replace_op(self, old: Operation, new: Operation) -> bool:
        """``new`` (already in the block, typed) stands for ``old``'s first output; ``old`` and
        whatever only fed it are removed by dead-code elimination later. False (and ``new``
        taken out again) when the function output names cannot be kept."""
        if self.substitute(old.outputs[0], new.outputs[0], old.block):
            return True
        new.block.remove(new)
        return False

    def drop(self, *ops: Operation) -> None:
        """Remove those of ``ops`` (a matched chain, producers first) that nothing reads now."""
        for op in reversed(ops):
            if op.block is not None and not any(o._uses or self.returned(o) for o in op.outputs):
                op.block.remove(op)


def with_scalar(
    op: Operation | None, op_type: str, *, const_second: bool = False
) -> tuple[Value, float] | None:
    """For ``op`` an ``op_type`` (default domain) of two inputs, one of them a one-number constant
    (``scalar``): (the other input, the number). ``const_second`` asks the constant to be the
    second operand (Sub, Div, Pow)."""
    if op is None or op.op_type != op_type or op.domain or len(op.inputs) != 2:
        return None
    a, b = op.inputs
    k = scalar(b)
    if k is not None and a is not None:
        return a, k
    k = scalar(a)
    if k is not None and b is not None and not const_second:
        return b, k
    return None


def close(value: float | None, target: float, rel: float = 1e-6) -> bool:
    """``value`` is ``target`` up to the rounding of a float32 constant."""
    return value is not None and abs(value - target) <= rel * abs(target)
