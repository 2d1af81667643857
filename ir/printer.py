"""A readable, MIL-like text dump of a program."""

from __future__ import annotations

import numpy as np

from .core import Block, Operation, Program, Value
from .registry import lookup


def _attr(a) -> str:
    if isinstance(a, Block):
        return f"<block {a.name}>"
    if isinstance(a, np.ndarray):
        return f"tensor{tuple(a.shape)}" if a.size > 8 else f"{a.tolist()}"
    if isinstance(a, list):
        return "[" + ", ".join(_attr(x) for x in a) + "]"
    if isinstance(a, float):
        return str(np.float32(a))  # ONNX float attributes are float32: print the shortest form
    return repr(a)


def _operation(op: Operation, indent: str, lines: list[str]) -> None:
    schema = lookup(op.domain, op.op_type)
    names = [p.name for p in schema.inputs] if schema else []
    args = []
    for i, v in enumerate(op.inputs):
        if v is None:
            continue
        key = names[i] if i < len(names) and not schema.inputs[i].variadic else f"in{i}"
        args.append(f"{key}=%{v.name}")
    args += [f"{k}={_attr(a)}" for k, a in op.attributes.items()]
    outs = ", ".join(f"%{o.name}: {o.type if o.type is not None else '?'}" for o in op.outputs)
    lines.append(f"{indent}{outs} = {op.qualified_type}({', '.join(args)})")
    for b in op.blocks:
        _block(b, indent + "    ", lines)


def _block(block: Block, indent: str, lines: list[str]) -> None:
    params = ", ".join(f"%{v.name}: {v.type}" for v in block.inputs)
    lines.append(f"{indent}block {block.name}({params}) {{")
    for v in block.constants.values():
        lines.append(f"{indent}    %{v.name}: {v.type} = const")
    for op in block.operations:
        _operation(op, indent + "    ", lines)
    lines.append(f"{indent}}} -> ({', '.join('%' + v.name for v in block.outputs)})")


def dump(obj: Program | Block | Value) -> str:
    """The program as text: one line per operation, ``%y: (1,64,fp32) = Conv(x=%x, …)``."""
    if isinstance(obj, Value):
        return repr(obj)
    lines: list[str] = []
    if isinstance(obj, Block):
        _block(obj, "", lines)
        return "\n".join(lines)
    for fn in obj.functions.values():
        opsets = ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in fn.opset_imports.items())
        lines.append(f"func {fn.name} [{opsets}]")
        _block(fn.body, "", lines)
    return "\n".join(lines)
