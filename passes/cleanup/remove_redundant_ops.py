"""cleanup::remove_redundant_ops — of several ops computing the same thing, keep the first.

Rule: two ops of one block are identical when they have the same type, domain and
attributes, and read the same inputs, an input being the same value or a constant of equal
dtype, shape and bytes. The later op's outputs are replaced by the earlier op's. Ops with
nested blocks and random ops (each run differs) are never merged; a later op whose output is
a function output is kept when the earlier one's is one too.

Before::

    %a: (2,3,fp32) = Mul(A=%x, B=%c1)
    %b: (2,3,fp32) = Mul(A=%x, B=%c2)     # %c2 equals %c1
    %y: (2,3,fp32) = Add(A=%a, B=%b)

After::

    %a: (2,3,fp32) = Mul(A=%x, B=%c1)
    %y: (2,3,fp32) = Add(A=%a, B=%a)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter
from ..registry import graph_pass
from .const_deduplication import fingerprint
from .const_elimination import RANDOM


def _attr_key(a):
    if isinstance(a, np.ndarray):
        return ("array", fingerprint(a))
    if isinstance(a, (list, tuple)):
        return tuple(_attr_key(x) for x in a)
    if isinstance(a, float) and a != a:
        return ("nan",)
    return repr(a)


def _key(op: Operation) -> tuple | None:
    if op.blocks or op.op_type in RANDOM:
        return None
    inputs = []
    for v in op.inputs:
        if v is None:
            inputs.append(None)
        elif v.const_value is not None:
            fp = fingerprint(v.const_value)
            if fp is None:
                return None
            inputs.append(("const", fp))
        else:
            inputs.append(id(v))
    attrs = tuple(sorted((k, _attr_key(a)) for k, a in op.attributes.items()))
    return (op.domain, op.op_type, len(op.outputs), tuple(inputs), attrs)


@graph_pass("cleanup::remove_redundant_ops")
def remove_redundant_ops(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block in rw.blocks():
        seen: dict[tuple, Operation] = {}
        for op in list(block.operations):
            key = _key(op)
            if key is None:
                continue
            first = seen.setdefault(key, op)
            if first is op:
                continue
            pairs = list(zip(op.outputs, first.outputs))
            if any(rw.returned(o) and rw.returned(f) for o, f in pairs):
                continue
            for old, new in pairs:
                if old.uses or rw.returned(old):
                    rw.substitute(old, new, block)
            rw.drop(op)
            changed = True
    return changed
