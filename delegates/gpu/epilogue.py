"""Which ops of a partition run as the epilogue of the Conv that produces their input.

Rule: ``y = Conv(x, w[, b]); z = Relu(y)`` becomes one plan step ``Conv`` writing ``z`` with the
step key ``"epilogue": "Relu"``; its launcher (``ops/conv.py``) applies Relu where it stores the
result (after the bias), so the pair is one launch instead of two and ``y`` never exists.

Before: ``%y = Conv(X=%x, W=%w, B=%b)``; ``%z = Relu(X=%y)``
After:  ``%z = Conv(X=%x, W=%w, B=%b) +Relu``

Negative cases (each stays two steps):
- ``y`` is read by any other op, or by a branch or loop body, or is a result of the block: it
  must exist in memory;
- the consumer is another activation (Clip, LeakyRelu ...): only Relu is fused here;
- the producer is a ConvTranspose, Gemm or MatMul.
Numerics are unchanged: the kernel computes ``x < 0 ? 0 : x`` on the float32 sum, as elementwise
Relu does, before the value is stored (rounded to half under precision=fp16, which commutes with
Relu).
"""

from __future__ import annotations

EPILOGUES = {"Conv": frozenset({"Relu"})}  # producer op type → the consumers fused into it


def epilogues(ops: list, users: dict[int, set[int]], outputs: set[int]) -> dict[int, int]:
    """Step index of each op fused into its producer → that producer's step index. ``users``:
    value id → the steps reading it (branch and loop bodies included); ``outputs``: the ids of the
    block's results."""
    producer = {id(op.outputs[0]): s for s, op in enumerate(ops) if op.outputs and op.outputs[0] is not None}
    fused: dict[int, int] = {}
    for s, op in enumerate(ops):
        if len(op.inputs) != 1 or op.inputs[0] is None:
            continue
        y = op.inputs[0]
        p = producer.get(id(y))
        if p is None or op.op_type not in EPILOGUES.get(ops[p].op_type, ()):
            continue
        if id(y) in outputs or users.get(id(y)) != {s} or len(ops[p].outputs) != 1:
            continue
        fused[s] = p
    return fused
