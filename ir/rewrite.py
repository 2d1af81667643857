"""Graph editing: fresh names, placing and building ops, replacing values, order, dead ops.

The helpers passes and the partitioner's lowering share. Values keep use-lists (see
core.py), so replacing a value rewires every operation that reads it, in nested blocks too;
what use-lists do not see are *block results* (a function's outputs, a branch or loop body
returning a value), which :func:`replace_all_uses` rewrites as well.

A function's outputs are its interface: their names are what ``evaluate`` returns and what a
.pte method declares. :func:`substitute` keeps them: when the replaced value is a function
output, the replacement takes over its name, or nothing changes when it cannot (the
replacement is a graph input, a constant or another output).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from offload.errors import VerificationError

from .core import Attribute, Block, Operation, Program, Value
from .inference import infer_op
from .registry import lookup

__all__ = [
    "Namer",
    "add_constant",
    "all_names",
    "build",
    "captured",
    "insert_after",
    "insert_before",
    "is_function_output",
    "is_removable",
    "reads",
    "remove_dead_ops",
    "replace_all_uses",
    "replace_results",
    "substitute",
    "top_level_op",
    "toposort",
]


# ---- names ---------------------------------------------------------------------------------


def all_names(program: Program) -> set[str]:
    """Every value name the program defines: constants, parameters and op outputs, nested too."""
    names: set[str] = set()
    for fn in program.functions.values():
        names.update(_block_names(fn.body))
    return names


def _block_names(block: Block) -> Iterator[str]:
    yield from block.constants
    yield from (v.name for v in block.inputs)
    for op in block.operations:
        yield from (v.name for v in op.outputs if v.name)
        for b in op.blocks:
            yield from _block_names(b)


class Namer:
    """Hands out value names no other value of the program has (``stem``, ``stem.1``, …)."""

    def __init__(self, program: Program | None = None, taken: Iterable[str] = ()):
        self.taken: set[str] = set(taken)
        if program is not None:
            self.taken |= all_names(program)

    def fresh(self, stem: str) -> str:
        candidate, i = stem, 0
        while candidate in self.taken:
            i += 1
            candidate = f"{stem}.{i}"
        self.taken.add(candidate)
        return candidate

    def reserve(self, name: str) -> None:
        self.taken.add(name)

    def __contains__(self, name: str) -> bool:
        return name in self.taken


# ---- placing and building ops --------------------------------------------------------------


def insert_before(anchor: Operation, op: Operation) -> Operation:
    """Put ``op`` into ``anchor``'s block right before it."""
    block = _block_of(anchor)
    block.operations.insert(block.operations.index(anchor), op)
    op.block = block
    return op


def insert_after(anchor: Operation, op: Operation) -> Operation:
    """Put ``op`` into ``anchor``'s block right after it."""
    block = _block_of(anchor)
    block.operations.insert(block.operations.index(anchor) + 1, op)
    op.block = block
    return op


def _block_of(op: Operation) -> Block:
    if op.block is None:
        raise ValueError(f"{op} is in no block")
    return op.block


def build(
    block: Block,
    op_type: str,
    inputs: list[Value | None],
    attributes: dict[str, Attribute] | None = None,
    *,
    namer: Namer,
    stem: str | None = None,
    domain: str = "",
    num_outputs: int = 1,
    before: Operation | None = None,
    after: Operation | None = None,
    name: str = "",
) -> Operation:
    """A new op in ``block`` (appended, or placed ``before`` / ``after`` an op of it) with fresh
    output names and the output types its schema infers from ``inputs``.

    ``build(block, "Mul", [a, b], namer=namer, before=op)``
    """
    stem = stem or op_type.lower()
    names = [namer.fresh(stem) for _ in range(num_outputs)]
    op = Operation(op_type, inputs, attributes, domain=domain, name=name, output_names=names)
    for out, t in zip(op.outputs, infer_op(op)):
        out.type = t
    if before is not None:
        if before.block is not block:
            raise ValueError(f"{before} is not in block '{block.name}'")
        insert_before(before, op)
    elif after is not None:
        if after.block is not block:
            raise ValueError(f"{after} is not in block '{block.name}'")
        insert_after(after, op)
    else:
        block.append(op)
    return op


def add_constant(block: Block, array: np.ndarray, *, namer: Namer, stem: str = "const") -> Value:
    """A new constant of ``block`` holding ``array``, under a fresh name."""
    return block.add_constant(namer.fresh(stem), np.asarray(array))


# ---- what reads what -----------------------------------------------------------------------


def reads(op: Operation) -> list[Value]:
    """The values ``op`` reads: its inputs, plus what its nested blocks read from outside them."""
    out = [v for v in op.inputs if v is not None]
    for block in op.blocks:
        out.extend(captured(block))
    return out


def captured(block: Block) -> list[Value]:
    """The values ``block`` reads (or returns) that are defined outside it."""
    defined = {id(v) for v in [*block.inputs, *block.constants.values()]}
    out = []
    for op in block.operations:
        out.extend(v for v in reads(op) if id(v) not in defined)
        defined.update(id(v) for v in op.outputs)
    out.extend(v for v in block.outputs if id(v) not in defined)
    return out


def top_level_op(op: Operation) -> Operation:
    """The op of the outermost block that holds ``op`` (itself if it is one)."""
    while op.block is not None and op.block.parent is not None:
        op = op.block.parent
    return op


def is_function_output(v: Value, block: Block) -> bool:
    """Whether ``v`` is a result of ``block`` and ``block`` is a function body (no parent op)."""
    return block.parent is None and any(o is v for o in block.outputs)


def _root(v: Value, block: Block | None) -> Block:
    if block is not None:
        return block
    if v.producer is None or v.producer.block is None:
        raise ValueError(f"%{v.name} has no producer in a block; say which block defines it")
    return v.producer.block


# ---- replacing values ----------------------------------------------------------------------


def replace_all_uses(
    old: Value, new: Value, block: Block | None = None, *, skip: Block | None = None
) -> None:
    """Every read of ``old`` reads ``new``: op inputs (nested ops included, through use-lists)
    and the results of ``block`` and of every block nested in it.

    ``block`` is where ``old`` is defined (by default its producer's block); a nested block can
    only return values of blocks that enclose it, so nothing outside ``block`` can name ``old``.
    ``skip`` is a nested block whose results are left as they are.
    """
    old.replace_all_uses_with(new)
    replace_results(old, new, _root(old, block), skip=skip)


def replace_results(old: Value, new: Value, block: Block, *, skip: Block | None = None) -> None:
    """Where ``block`` or a block nested in it (but ``skip``) returns ``old``, it returns ``new``."""
    for b in _blocks_in(block):
        if b is not skip:
            b.outputs = [new if v is old else v for v in b.outputs]


def _blocks_in(block: Block) -> Iterator[Block]:
    yield block
    for op in block.walk():
        yield from op.blocks


def substitute(old: Value, new: Value, block: Block | None = None) -> bool:
    """Replace ``old`` by ``new`` everywhere, keeping the function's output names.

    When ``old`` is a function output, ``new`` takes over its name (the two swap names);
    when ``new`` cannot (it is a graph input, a constant or itself a function output) nothing
    changes and the answer is False.
    """
    root = _root(old, block)
    body = root
    while body.parent is not None:
        body = body.parent.block
    if is_function_output(old, body):
        if new.producer is None or is_function_output(new, body):
            return False
        old.name, new.name = new.name, old.name
        if new.type is None:
            new.type = old.type
    replace_all_uses(old, new, root)
    return True


# ---- order ---------------------------------------------------------------------------------


def toposort(block: Block) -> None:
    """Reorder ``block`` so every op follows the ops it reads from; ops already in order keep
    their relative order. Reads of nested blocks count as reads of the op holding them."""
    done: set[int] = set()
    entered: set[int] = set()  # expanded, its producers not all placed yet
    order: list[Operation] = []
    in_block = {id(op): op for op in block.operations}

    def producer_here(v: Value) -> Operation | None:
        op = v.producer
        while op is not None and id(op) not in in_block:
            op = op.block.parent if op.block is not None else None
        return op

    for start in list(block.operations):
        stack = [(start, False)]
        while stack:
            current, expanded = stack.pop()
            if id(current) in done:
                continue
            if expanded:
                done.add(id(current))
                order.append(current)
                continue
            if id(current) in entered:
                raise VerificationError(f"block '{block.name}' has a cycle through {current.qualified_type}")
            entered.add(id(current))
            stack.append((current, True))
            for v in reversed(reads(current)):
                producer = producer_here(v)
                if producer is not None and producer is not current and id(producer) not in done:
                    stack.append((producer, False))
    block.operations[:] = order


# ---- dead ops ------------------------------------------------------------------------------


def is_removable(op: Operation) -> bool:
    """Whether ``op`` may go when nothing reads its outputs: its semantics are known (it has a
    schema) and they have no effect beyond its outputs. Every op of the registered op sets is
    such an op; an unknown op may do anything, so it stays."""
    return lookup(op.domain, op.op_type) is not None


def remove_dead_ops(block: Block, *, constants: bool = True) -> int:
    """Remove ops of ``block`` (and of blocks nested in it) whose outputs nothing reads and no
    block returns, repeatedly; with ``constants``, unread constants too. Returns how many went."""
    removed = 0
    while True:
        went = _sweep(block)
        if not went:
            break
        removed += went
    if constants:
        returned = {id(v) for b in _blocks_in(block) for v in b.outputs}
        for b in _blocks_in(block):
            for name, v in list(b.constants.items()):
                if not v._uses and id(v) not in returned:
                    del b.constants[name]
                    removed += 1
    return removed


def _sweep(block: Block) -> int:
    """One backward sweep over every block; stops early after removing an op with nested blocks,
    whose results no longer count as reads."""
    returned = {id(v) for b in _blocks_in(block) for v in b.outputs}
    removed = 0
    for b in list(_blocks_in(block)):
        for op in reversed(list(b.operations)):
            if not is_removable(op) or any(o._uses or id(o) in returned for o in op.outputs):
                continue
            _drop_nested_reads(op)
            b.remove(op)
            removed += 1
            if op.blocks:
                return removed
    return removed


def _drop_nested_reads(op: Operation) -> None:
    """Detach the ops of ``op``'s nested blocks from the values they read (use-lists)."""
    for b in op.blocks:
        for inner in b.walk():
            inner.drop_inputs()
