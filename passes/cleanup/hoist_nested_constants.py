"""cleanup::hoist_nested_constants — a constant that an If branch or a Loop / Scan body holds moves
to the function's top block.

Rule: a constant of a nested block (at any depth) is the same array in every branch taken and
every iteration, and a nested block may read the values of the blocks around it; so the
constant becomes a constant of the function's top block, read from there by the same ops. Its
name stays unless another value of the function has it already (sibling branches often hold a
constant of the same name), then it gets a fresh one. Nothing is computed differently: the
values are the same, bit for bit. What it changes is where a backend finds the array: a GPU
delegate takes the weights of its partition from the outer graph, so an If whose branch holds a
large weight runs on the device once the weight is outside the branch.

Not hoisted: a constant that a nested block returns (a block result must be defined in the block
that returns it: the partitioner's lowering carries no captured value out of a delegate's branch,
``passes/pattern.py``).

Before::

    %y: (4,fp32) = If(cond=%c, then_branch=
      () {
        %w: (4,fp32) = [constant]
        %t: (4,fp32) = Mul(A=%x, B=%w)
      } -> (%t), else_branch= …)

After::

    %w: (4,fp32) = [constant]
    %y: (4,fp32) = If(cond=%c, then_branch=
      () {
        %t: (4,fp32) = Mul(A=%x, B=%w)
      } -> (%t), else_branch= …)
"""

from __future__ import annotations

from offload.ir import Program

from ..pattern import Rewriter, blocks, name_counts
from ..registry import graph_pass


@graph_pass("cleanup::hoist_nested_constants")
def hoist_nested_constants(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for fn in program.functions.values():
        top = fn.body
        nested = [b for b in blocks(top) if b is not top and b.constants]
        if not nested:
            continue
        counts = name_counts(top)
        for block in nested:
            for name, v in list(block.constants.items()):
                if rw.returned(v):
                    continue
                del block.constants[name]
                if counts[name] > 1:  # another value of the function has the name
                    counts[name] -= 1
                    v.name = rw.namer.fresh(name)
                    counts[v.name] += 1
                top.constants[v.name] = v
                changed = True
    return changed
