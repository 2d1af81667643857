"""cleanup::loop_invariant_elimination — a Loop-carried value the body passes through unchanged is no loop value.

Rule: in ``Loop(M, cond, v_1 … v_n)`` whose body returns its carried parameter k unchanged
(body result 1+k is body parameter 2+k), the body reads the initial value ``v_k`` directly
(a body may read the values of the blocks around it), the carried slot goes from the Loop's
inputs, the body's parameters and results, and the Loop's final value k is ``v_k`` itself
(an ``Identity(v_k)`` when the final value is a graph output whose name must stay and
``v_k`` cannot take it). Every iteration, and zero iterations, see and give ``v_k``: the
values are the same, bit for bit.

Before::

    %l0: (1,2,fp32), %l1: (1,2,fp32) = Loop(M=%n, cond=%c, v_initial=%a, v_initial=%b, body=
      (%i: (i64), %cond_in: (bool), %a_in: (1,2,fp32), %b_in: (1,2,fp32)) {
        %s: (1,2,fp32) = Add(A=%a_in, B=%b_in)
      } -> (%cond_in, %s, %b_in))

After::

    %l0: (1,2,fp32) = Loop(M=%n, cond=%c, v_initial=%a, body=
      (%i: (i64), %cond_in: (bool), %a_in: (1,2,fp32)) {
        %s: (1,2,fp32) = Add(A=%a_in, B=%b)
      } -> (%cond_in, %s))
    %l1: (1,2,fp32) = Identity(input=%b)          # only where %l1 must keep its name
"""

from __future__ import annotations

from offload.ir import Block, Operation, Program, replace_all_uses

from ..pattern import Rewriter
from ..registry import graph_pass


def _invariant_slots(loop: Operation, body: Block) -> list[int]:
    """Carried slots k (0-based) whose body result is the body parameter itself."""
    n = len(loop.inputs) - 2
    return [
        k
        for k in range(n)
        if loop.inputs[2 + k] is not None
        and 2 + k < len(body.inputs)
        and 1 + k < len(body.outputs)
        and body.outputs[1 + k] is body.inputs[2 + k]
    ]


@graph_pass("cleanup::loop_invariant_elimination")
def loop_invariant_elimination(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, loop in rw.ops():
        body = loop.attributes.get("body")
        if loop.op_type != "Loop" or loop.domain or not isinstance(body, Block) or not rw.alive(loop):
            continue
        slots = _invariant_slots(loop, body)
        if not slots:
            continue
        n = len(loop.inputs) - 2
        keep = [k for k in range(n) if k not in slots]
        # the body: parameters and results of the invariant slots go; their readers read v_k
        params = [body.inputs[2 + k] for k in slots]
        body.inputs = body.inputs[:2] + [body.inputs[2 + k] for k in keep] + body.inputs[2 + n :]
        body.outputs = [body.outputs[0]] + [body.outputs[1 + k] for k in keep] + body.outputs[1 + n :]
        for k, p in zip(slots, params):
            replace_all_uses(p, loop.inputs[2 + k], body)
        inputs = list(loop.inputs[:2]) + [loop.inputs[2 + k] for k in keep]
        old = loop.outputs
        finals = [old[k] for k in keep] + old[n:]
        new = Operation(
            "Loop",
            inputs,
            dict(loop.attributes),
            name=loop.name,
            output_names=[rw.namer.fresh(v.name) for v in finals],
        )
        for v, w in zip(finals, new.outputs):
            w.type = v.type
        block.operations.insert(block.operations.index(loop), new)
        new.block = block
        for v, w in zip(finals, new.outputs):
            rw.substitute(v, w, block)
        for k in slots:
            v0 = loop.inputs[2 + k]
            if (old[k].uses or rw.returned(old[k])) and not rw.substitute(old[k], v0, block):
                ident = rw.build(block, "Identity", [v0], before=new, stem="loop_invariant")
                rw.substitute(old[k], ident.outputs[0], block)
        # the old op's outputs are all unread now (function outputs moved to the new names)
        loop.attributes = {k: v for k, v in loop.attributes.items() if k != "body"}
        block.remove(loop)
        changed = True
    return changed
