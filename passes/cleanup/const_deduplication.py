"""cleanup::const_deduplication — constants of equal dtype, shape and value become one.

Rule: within a block, a constant equal (same dtype, shape and bytes) to an earlier constant
of that block is replaced by it. Constants that are function outputs stay (their names are
the interface).

Before::

    block main(%q: (2,8,fp32), %k: (2,8,fp32)) {
        %w_q: (8,8,fp32) = const
        %w_k: (8,8,fp32) = const      # same values as %w_q
        %a: (2,8,fp32) = MatMul(A=%q, B=%w_q)
        %b: (2,8,fp32) = MatMul(A=%k, B=%w_k)
    } -> (%a, %b)

After::

    block main(%q: (2,8,fp32), %k: (2,8,fp32)) {
        %w_q: (8,8,fp32) = const
        %a: (2,8,fp32) = MatMul(A=%q, B=%w_q)
        %b: (2,8,fp32) = MatMul(A=%k, B=%w_q)
    } -> (%a, %b)
"""

from __future__ import annotations

import hashlib

from offload.ir import Program
from offload.ir.rewrite import is_function_output, replace_all_uses

from ..pattern import Rewriter
from ..registry import graph_pass


def fingerprint(array) -> tuple | None:
    """A key equal for arrays of equal dtype, shape and bytes (None for object arrays)."""
    if array.dtype == object:
        return None
    digest = hashlib.sha1(array.tobytes()).hexdigest()
    return (array.dtype.str, array.shape, digest)


@graph_pass("cleanup::const_deduplication")
def const_deduplication(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block in rw.blocks():
        first: dict[tuple, object] = {}
        for name, v in list(block.constants.items()):
            key = fingerprint(v.const_value)
            if key is None or is_function_output(v, block):
                continue
            kept = first.setdefault(key, v)
            if kept is v:
                continue
            replace_all_uses(v, kept, block)
            del block.constants[name]
            changed = True
    return changed
