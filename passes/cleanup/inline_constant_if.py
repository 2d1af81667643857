"""cleanup::inline_constant_if — an If whose condition is a constant is the branch it takes.

Rule: ``If(cond)`` with a constant one-element ``cond`` and no output that a block returns
becomes the ops of the branch ``cond`` picks, moved into the If's block in their order (the
branch's constants with them), each If output replaced by that branch's result. The other
branch is dropped. Types are inferred again afterwards: an If whose branches give different
ranks (an exporter's ``if x.dim() == 4: x = x.squeeze(1)``) has an output of unknown rank, and
every value computed from it had one too, which kept fusions from matching and GPU backends
from taking those ops.

Before::

    %c: (1,bool) = const                                     # [True]
    %y: (*,fp32) = If(cond=%c, then_branch=
      block then() {
        %t: (1,1,?,fp32) = Squeeze(data=%x, axes=%one)       # %x: (1,1,1,?,fp32)
      } -> (%t), else_branch=
      block else() {
        %e: (1,1,1,?,fp32) = Identity(input=%x)
      } -> (%e))
    %z: (*,fp32) = Conv(X=%y, W=%w)

After::

    %t: (1,1,?,fp32) = Squeeze(data=%x, axes=%one)
    %z: (1,258,?,fp32) = Conv(X=%t, W=%w)

Left alone: a condition that is not a constant, an If whose output some block returns (its
name is an interface, or a nested block would return a value it only captures).
"""

from __future__ import annotations

from collections import Counter

from offload.ir import Block, Operation, Program, infer_types

from ..pattern import Rewriter, blocks, const, name_counts
from ..registry import graph_pass


def _inline(rw: Rewriter, op: Operation, taken: Block, counts: Counter) -> None:
    """Move ``taken``'s constants and ops before ``op``; a name that another scope of the
    function also has (a sibling block's value) is renamed, as the verifier wants one per chain."""
    block = op.block
    for name, v in list(taken.constants.items()):
        del taken.constants[name]
        if counts[name] > 1:
            v.name = rw.namer.fresh(name)
        block.constants[v.name] = v
    moved = list(taken.operations)
    taken.operations.clear()
    for inner in moved:
        inner.block = block
        for v in inner.outputs:
            if v is not None and counts[v.name] > 1:
                v.name = rw.namer.fresh(v.name)
    at = block.operations.index(op)
    block.operations[at:at] = moved
    for out, result in zip(op.outputs, taken.outputs):
        out.replace_all_uses_with(result)
    taken.outputs.clear()
    for b in op.blocks:  # the branch not taken reads outer values no more
        for inner in b.walk():
            inner.drop_inputs()
    block.remove(op)


@graph_pass("cleanup::inline_constant_if")
def inline_constant_if(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for fn in program.functions.values():
        changed |= _inline_in(rw, fn.body)
    if changed:
        infer_types(program)
    return changed


def _inline_in(rw: Rewriter, top: Block) -> bool:
    changed = False
    counts = name_counts(top)
    for op in [op for b in blocks(top) for op in list(b.operations)]:
        if op.op_type != "If" or op.domain or op.block is None:
            continue
        cond = const(op.inputs[0])
        if cond is None or cond.size != 1 or any(rw.returned(o) for o in op.outputs):
            continue
        taken = op.attributes.get("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
        if taken is None or taken.inputs or len(taken.outputs) != len(op.outputs):
            continue
        _inline(rw, op, taken, counts)
        changed = True
    return changed
