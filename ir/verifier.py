"""The verifier: SSA, topological order, unique names, operator signatures and types."""

from __future__ import annotations

import re

from offload.errors import VerificationError

from .core import Block, Operation, Program, Value
from .inference import infer_op
from .registry import lookup
from .types import TensorType

_IDENT = re.compile(r"^[^\s]+$")


def _fail(where: str, msg: str) -> None:
    raise VerificationError(f"{where}: {msg}")


def _check_signature(op: Operation, where: str) -> None:
    schema = lookup(op.domain, op.op_type)
    if schema is None:
        return  # unknown ops are allowed in the IR; running them is what fails
    ins, n = schema.inputs, len(op.inputs)
    variadic = bool(ins) and ins[-1].variadic
    required = [i for i, p in enumerate(ins) if not p.optional and not p.variadic]
    if n > len(ins) and not variadic:
        _fail(where, f"{op.op_type} takes at most {len(ins)} inputs, got {n}")
    for i in required:
        if i >= n or op.inputs[i] is None:
            _fail(where, f"{op.op_type} input {i} ({ins[i].name}) is required but missing")
    for name, spec in schema.attributes.items():
        if spec.required and name not in op.attributes:
            _fail(where, f"{op.op_type} attribute '{name}' is required but missing")


def shape_conflicts(op: Operation) -> list[tuple[Value, TensorType, str]]:
    """The outputs whose declared type disagrees with what the op's schema infers from its
    inputs: (output, inferred type, what disagrees). A dtype conflict comes first."""
    found = []
    for out, inferred in zip(op.outputs, infer_op(op)):
        declared = out.type
        if not isinstance(declared, TensorType) or not isinstance(inferred, TensorType):
            continue
        if declared.dtype != inferred.dtype:
            found.append((out, inferred, inferred.dtype.short))
        elif declared.shape is None or inferred.shape is None:
            continue
        elif len(declared.shape) != len(inferred.shape):
            found.append((out, inferred, f"rank {len(inferred.shape)}"))
        elif any(
            isinstance(d, int) and isinstance(i, int) and d != i
            for d, i in zip(declared.shape, inferred.shape)
        ):
            found.append((out, inferred, str(inferred)))
    return found


def _check_types(op: Operation, where: str) -> None:
    """Declared output types must agree with what the op's schema infers from its inputs."""
    for out, _, gives in shape_conflicts(op):
        _fail(where, f"output '%{out.name}' is declared {out.type} but {op.op_type} gives {gives}")


def _block(block: Block, visible: set[int], names: set[str], where: str) -> None:
    defined = set(visible)

    def define(v: Value, what: str) -> None:
        if not v.name or not _IDENT.match(v.name):
            _fail(where, f"{what} has an invalid name {v.name!r}")
        if v.name in names:
            _fail(where, f"value '{v.name}' is defined twice ({what})")
        names.add(v.name)
        defined.add(id(v))

    for v in block.constants.values():
        define(v, "constant")
    for v in block.inputs:
        define(v, f"parameter of block '{block.name}'")
    for op in block.operations:
        label = f"{where}: op '{op.name or op.op_type}' ({op.qualified_type})"
        if op.block is not block:
            _fail(label, "is listed in a block it does not belong to")
        for i, v in enumerate(op.inputs):
            if v is not None and id(v) not in defined:
                _fail(label, f"input {i} '%{v.name}' is used before it is defined (or never is)")
        _check_signature(op, label)
        _check_types(op, label)
        for b in op.blocks:
            # A nested block sees what is defined so far, and its names are scoped to it.
            _block(b, defined, set(names), f"{label} / block '{b.name}'")
        for out in op.outputs:
            if out.producer is not op:
                _fail(label, f"output '%{out.name}' names another producer")
            if out.name or out.uses:  # an unnamed, unused output is an omitted optional one
                define(out, f"output of {op.op_type}")
    for v in block.outputs:
        if id(v) not in defined:
            _fail(where, f"block '{block.name}' returns '%{v.name}', which it never defines")


def _storage(t) -> tuple:
    return (getattr(t, "dtype", None), getattr(t, "shape", None)) if isinstance(t, TensorType) else (t,)


def verify(program: Program) -> None:
    """Raise VerificationError naming the op and the value on the first broken invariant."""
    for fn in program.functions.values():
        _block(fn.body, set(), set(), f"function '{fn.name}'")
        names = [v.name for v in fn.inputs]
        for k, s in enumerate(fn.states):
            if s not in names or fn.states.index(s) != k:
                _fail(f"function '{fn.name}'", f"state '{s}' is not one input of the function")
            out = (
                fn.outputs[len(fn.outputs) - len(fn.states) + k]
                if len(fn.outputs) >= len(fn.states)
                else None
            )
            want = fn.inputs[names.index(s)].type
            # dtype and shape: a state's quantization parameters are the import's annotation,
            # which a rewritten producer of the same integers need not repeat
            if out is None or (
                out.type is not None and want is not None and _storage(out.type) != _storage(want)
            ):
                _fail(
                    f"function '{fn.name}'",
                    f"state '{s}' has no output of its type {want} among the last outputs",
                )
