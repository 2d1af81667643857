"""Copies of IR programs and blocks that share nothing mutable with the original.

``copy.deepcopy`` is not right for the IR: a Value's use-list is keyed by ``id(operation)``,
and those ids change in a copy. Here every Value and Operation is rebuilt through the public
constructors, so use-lists are rebuilt too. Constant arrays and array attributes are shared,
not copied: the IR never mutates them in place.
"""

from __future__ import annotations

from offload.errors import VerificationError

from .core import Block, Function, Operation, Program, Value


def clone_value(v: Value, name: str | None = None) -> Value:
    """A fresh Value with the same type and constant (and name, unless one is given)."""
    return Value(v.name if name is None else name, v.type, v.const_value)


def clone_block(block: Block, mapping: dict[int, Value] | None = None) -> Block:
    """Copy ``block``; ``mapping`` maps id(old value) → new value for values it reads from outside.

    The mapping is extended with every value the block defines, so a caller cloning nested
    blocks passes the same dict down.
    """
    mapping = {} if mapping is None else mapping
    new = Block(block.name)
    for name, v in block.constants.items():
        new.constants[name] = mapping[id(v)] = clone_value(v)
    for v in block.inputs:
        new.inputs.append(_define(mapping, v))
    for op in block.operations:
        new.append(_clone_op(op, mapping))
    new.outputs = [_lookup(mapping, v, block) for v in block.outputs]
    return new


def _define(mapping: dict[int, Value], v: Value) -> Value:
    mapping[id(v)] = clone_value(v)
    return mapping[id(v)]


def _lookup(mapping: dict[int, Value], v: Value, where: Block) -> Value:
    # Falling back to the original value would add uses to it, i.e. change the input program.
    try:
        return mapping[id(v)]
    except KeyError:
        raise VerificationError(
            f"block '{where.name}' reads '%{v.name}', which is not defined before it"
        ) from None


def _clone_attribute(a, mapping: dict[int, Value]):
    if isinstance(a, Block):
        # A nested block reads the enclosing values; it defines its own in a scoped copy.
        return clone_block(a, dict(mapping))
    if isinstance(a, list):
        return [_clone_attribute(x, mapping) for x in a]
    return a


def _clone_op(op: Operation, mapping: dict[int, Value]) -> Operation:
    where = op.block or Block(op.name)
    inputs = [None if v is None else _lookup(mapping, v, where) for v in op.inputs]
    attributes = {k: _clone_attribute(a, mapping) for k, a in op.attributes.items()}
    new = Operation(
        op.op_type,
        inputs,
        attributes,
        num_outputs=len(op.outputs),
        domain=op.domain,
        name=op.name,
        output_names=[o.name for o in op.outputs],
    )
    for old, out in zip(op.outputs, new.outputs):
        out.type, out.const_value = old.type, old.const_value
        mapping[id(old)] = out
    return new


def clone_function(fn: Function) -> Function:
    return Function(fn.name, clone_block(fn.body), dict(fn.opset_imports), list(fn.states))


def clone_program(program: Program) -> Program:
    """A deep copy of ``program``: editing the copy never changes the original."""
    functions = {name: clone_function(fn) for name, fn in program.functions.items()}
    return Program(functions, dict(program.metadata), program.source)
