"""Which ops of a partition run as the epilogue of the Conv that produces their input.

Rules (the chain after a Conv of any group):

1. ``y = Conv(x, w[, b]); z = Relu(y)`` → one plan step ``Conv`` writing ``z`` with
   ``"epilogue": ["Relu"]``: the kernel applies Relu where it stores the result (after the bias).
2. ``y = Conv(x, w[, b]); s = Add(y, r)`` (or ``Add(r, y)``, or ``Sum`` of the two) → one step
   ``Conv`` writing ``s`` with ``"epilogue": ["Add"]`` and ``"residual": r``: the Conv writes into
   ``r``'s buffer, adding what it holds after its bias (``ops/conv.py``).
3. Rule 2 then ``z = Relu(s)`` → ``"epilogue": ["Add", "Relu"]`` (ResNet's block ends).

Before: ``%y = Conv(X=%x, W=%w, B=%b)``; ``%s = Add(A=%y, B=%r)``; ``%z = Relu(X=%s)``
After:  ``%z = Conv(X=%x, W=%w, B=%b) +Add(%r) +Relu``

Negative cases (the ops stay steps of their own):
- a value of the chain (``y``, ``s``) is read by any other op or a branch or loop body, or is a
  result of the block: it must exist in memory;
- the residual ``r`` is read after the Add, is a block input or output, a constant, of another
  shape than ``y`` (a broadcasting Add), or comes from the Conv's own group: the Conv overwrites it;
- the plan stores values as half (precision=fp16): the unfused Add reads ``y`` rounded to half,
  the fused one would add the float32 sum (rule 1 still applies: rounding commutes with Relu);
- other activations (Clip, LeakyRelu ...) and other producers (ConvTranspose, Gemm, MatMul).
Numerics are unchanged: each kernel computes ``(conv + bias) + r`` and ``x < 0 ? 0 : x`` in
float32 in the unfused order.
"""

from __future__ import annotations

ADDS = frozenset({"Add", "Sum"})


def epilogues(
    ops: list, users: dict[int, set[int]], outputs: set[int], residuals: bool = True, kept=frozenset()
) -> dict[int, int]:
    """Step index of each op fused into a Conv's epilogue → the step it follows in the chain.
    ``users``: value id → the steps reading it (branch and loop bodies included); ``outputs``: the
    ids of the block's results; ``residuals``: whether rules 2 and 3 may apply; ``kept``: Add
    steps not to fuse (the caller found a reader of their residual running after them)."""
    producer = {id(v): s for s, op in enumerate(ops) for v in op.outputs if v is not None}
    context = (users, outputs, producer)
    fused: dict[int, int] = {}
    chain: dict[int, tuple[int, tuple[str, ...]]] = {}  # step → (its Conv, the epilogue so far)
    for s, op in enumerate(ops):
        if op.op_type == "Conv" and len(op.outputs) == 1:
            chain[s] = (s, ())
            continue
        ins = [v for v in op.inputs if v is not None]
        if len(op.outputs) != 1:
            continue
        for y in ins:  # an Add may extend the chain of either operand
            prev = producer.get(id(y))
            if prev not in chain or id(y) in outputs or users.get(id(y)) != {s}:
                continue
            conv, done = chain[prev]
            if op.op_type == "Relu" and "Relu" not in done and len(ins) == 1:
                fused[s], chain[s] = prev, (conv, (*done, "Relu"))
            elif (
                op.op_type in ADDS
                and not done
                and residuals
                and s not in kept
                and _residual_ok(ops, conv, s, y, context)
            ):
                fused[s], chain[s] = prev, (conv, ("Add",))
            if s in fused:
                break
    return fused


def residual(op, y):
    """The Add's (or two-input Sum's) operand that is not the Conv's output ``y``."""
    (r,) = [v for v in op.inputs if v is not y]
    return r


def _residual_ok(ops, conv: int, s: int, y, context) -> bool:
    """Rule 2's conditions on the residual of the Add at step ``s`` (module docstring);
    ``context``: the users, block results and producers of ``epilogues``."""
    users, outputs, producer = context
    op = ops[s]
    if len(op.inputs) != 2 or sum(v is y for v in op.inputs) != 1:
        return False
    r = residual(op, y)
    if r is None or r.is_constant or id(r) in outputs or id(r) not in producer:
        return False
    if r.type.shape is None or y.type.shape is None or tuple(r.type.shape) != tuple(y.type.shape):
        return False
    if r.type.dtype != y.type.dtype or any(r is v for v in ops[conv].inputs):
        return False
    return all(t <= s for t in users.get(id(r), ()))
