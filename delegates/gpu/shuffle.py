"""Which channel shuffles a depthwise Conv reads through its input indexing instead of a copy.

Rule (ShuffleNet's channel shuffle of S groups, then a depthwise Conv):
``r = Reshape(v, [N, S, C/S, *sp]); t = Transpose(r, perm=[0, 2, 1, 3, ...]);
u = Reshape(t, [N, C, *sp]); y = Conv(u, w[, b])`` with ``w`` of shape [M, 1, ...] (one input
channel per group) → one plan step ``Conv`` reading ``v`` with ``"shuffle": S`` (plan format 7):
its kernel reads channel ``ch`` of ``u`` as channel ``(ch % S) * (C/S) + ch / S`` of ``v``, which
is where the Transpose would have copied it from.

Before: ``%r = Reshape(%v, %s1)``; ``%t = Transpose(%r, perm=[0, 2, 1, 3, 4])``;
``%u = Reshape(%t, %s2)``; ``%y = Conv(X=%u, W=%w, B=%b, group=C)``
After:  ``%y = Conv(X=%v, W=%w, B=%b, group=C) shuffle=S``

Negative cases (the three ops stay steps of their own):
- ``r``, ``t`` or ``u`` is read by any other op, a branch or loop body, or is a result of the block;
- a shape of the chain is not static, the Reshapes are not the split and merge of dim 1 into
  [S, C/S] and back, or the Transpose swaps other dims;
- the Conv has more than one input channel per group (it would not run as ``conv_direct``).
Numerics are unchanged: the Conv reads the same numbers from other addresses.
"""

from __future__ import annotations

from offload.ir import Operation
from offload.ir.rewrite import reads


def _static(v) -> tuple[int, ...] | None:
    shape = v.type.shape if v is not None else None
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _shuffle_of(ops: list[Operation], users, outputs, producer, conv: int) -> tuple[list[int], int] | None:
    """(the three shuffle steps, S) when the Conv at step ``conv`` reads a channel shuffle by the
    rule of the module docstring, else None."""
    op = ops[conv]
    w = op.inputs[1] if len(op.inputs) > 1 else None
    ws = _static(w)
    if ws is None or len(ws) < 3 or ws[1] != 1:
        return None
    chain: list[int] = []
    reader, x = conv, op.inputs[0]
    for kind in ("Reshape", "Transpose", "Reshape"):  # walking up from the Conv's input
        s = producer.get(id(x))
        if s is None or ops[s].op_type != kind or id(x) in outputs or users.get(id(x)) != {reader}:
            return None
        chain.append(s)
        reader, x = s, ops[s].inputs[0]
    merge, transpose, split = chain
    v, r, t, u = x, ops[split].outputs[0], ops[transpose].outputs[0], ops[merge].outputs[0]
    vs, rs, ts, us = (_static(a) for a in (v, r, t, u))
    if None in (vs, rs, ts, us) or len(vs) < 3 or us != vs or len(rs) != len(vs) + 1:
        return None
    S, D = rs[1], rs[2]
    perm = [int(p) for p in ops[transpose].attributes.get("perm", [])]
    if perm != [0, 2, 1, *range(3, len(rs))] or vs[1] != S * D or rs[:1] + rs[3:] != vs[:1] + vs[2:]:
        return None
    if ts != (rs[0], D, S, *rs[3:]):
        return None
    return [split, transpose, merge], S


def shuffles(ops: list[Operation], outputs: set[int]) -> dict[int, tuple[list[int], int]]:
    """Step index of each depthwise Conv that reads a channel shuffle → (the shuffle's three
    steps, S); ``outputs``: the ids of the block's results."""
    users: dict[int, set[int]] = {}
    for s, op in enumerate(ops):
        for v in reads(op):  # a branch or loop body reading a value counts as a use
            users.setdefault(id(v), set()).add(s)
    producer = {id(v): s for s, op in enumerate(ops) for v in op.outputs if v is not None}
    found = {}
    for s, op in enumerate(ops):
        if op.op_type == "Conv" and op.inputs and op.inputs[0] is not None:
            shuffle = _shuffle_of(ops, users, outputs, producer, s)
            if shuffle is not None:
                found[s] = shuffle
    return found
