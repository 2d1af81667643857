"""optimize_repeat_ops::unit_axis_moves — a chain of Transposes, Squeezes and Unsqueezes that
only moves axes of size 1 is one Squeeze and one Unsqueeze.

Rule: from a Transpose (and the moves before it), follow its readers while each is a
Transpose, or a Squeeze or Unsqueeze with constant axes, that alone reads the value before it. Track where each axis of the chain's
value comes from (an axis of the first input, or one an Unsqueeze made). At each value where the
first input's axes still there keep their order, the chain so far becomes ``Unsqueeze(Squeeze(x,
axes it dropped), axes it made)`` (either left out where it has none): the elements in the same
order, so the values are the same, bit for bit, and the executor's reshapes are views of
contiguous arrays where a Transpose made a strided view. The longest such chain is taken.

Before (a TFLite spectrogram's frames, STFT Conv to the channels-first Mul)::

    %t: (N,1,T,257,fp32) = Transpose(data=%c, perm=[0, 2, 3, 1])   # %c: (N,257,1,T): a Conv
    %s: (N,T,257,fp32) = Squeeze(data=%t, axes=[1])
    %u: (N,257,T,fp32) = Transpose(data=%s, perm=[0, 2, 1])
    %y: (N,1,257,T,fp32) = Unsqueeze(data=%u, axes=[1])

After::

    %s: (N,257,T,fp32) = Squeeze(data=%c, axes=[2])
    %y: (N,1,257,T,fp32) = Unsqueeze(data=%s, axes=[1])
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program, Value

from ..pattern import Rewriter, const, rank
from ..registry import graph_pass
from .merge_consecutive_transposes import perm_of

_NEW = -1  # an axis an Unsqueeze made
_MOVES = ("Transpose", "Squeeze", "Unsqueeze")


def _axes(op: Operation, r: int) -> list[int] | None:
    """A Squeeze's or Unsqueeze's constant axes, made non-negative for output rank ``r``; None
    where they are computed or absent."""
    w = op.inputs[1] if len(op.inputs) > 1 else None
    c = const(w) if w is not None else None
    if c is None or c.dtype.kind not in "iu" or c.ndim > 1 or c.size == 0:
        return None
    axes = [int(a) + r if int(a) < 0 else int(a) for a in c.reshape(-1)]
    return axes if all(0 <= a < r for a in axes) and len(set(axes)) == len(axes) else None


def _step(op: Operation, origins: list[int]) -> list[int] | None:
    """The origins of ``op``'s output axes from its input's, or None where it is not a move."""
    if op.domain or len(op.outputs) != 1:
        return None
    if op.op_type == "Transpose":
        p = perm_of(op)
        return [origins[i] for i in p] if p is not None and len(p) == len(origins) else None
    if op.op_type == "Squeeze":
        axes = _axes(op, len(origins))
        return None if axes is None else [o for i, o in enumerate(origins) if i not in axes]
    if op.op_type == "Unsqueeze":
        c = const(op.inputs[1]) if len(op.inputs) > 1 and op.inputs[1] is not None else None
        axes = None if c is None else _axes(op, len(origins) + c.size)
        if axes is None:
            return None
        rest = iter(origins)
        return [_NEW if i in axes else next(rest) for i in range(len(origins) + len(axes))]
    return None


def _in_order(origins: list[int]) -> bool:
    kept = [o for o in origins if o != _NEW]
    return kept == sorted(kept)


@graph_pass("optimize_repeat_ops::unit_axis_moves")
def unit_axis_moves(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, first in rw.ops():
        if first.op_type != "Transpose" or first.domain or not rw.alive(first) or first.inputs[0] is None:
            continue
        start = first  # back over the moves before it that nothing else reads
        while (
            (before := start.inputs[0].producer) is not None
            and before.block is block
            and before.op_type in _MOVES
            and not before.domain
            and before.inputs[0] is not None
            and rw.only_user(before.outputs[0]) is start
        ):
            start = before
        x = start.inputs[0]
        n = rank(x)
        if n is None:
            continue
        chain: list[Operation] = []
        origins: list[int] | None = list(range(n))
        op: Operation | None = start
        best: tuple[int, list[int]] | None = None
        while op is not None and op.block is block:
            origins = _step(op, origins)
            if origins is None:
                break
            chain.append(op)
            if _in_order(origins) and any(o.op_type == "Transpose" for o in chain):
                best = (len(chain), origins)
            op = rw.only_user(op.outputs[0])
        if best is None:
            continue
        length, origins = best
        done = _rewrite(rw, block, x, chain[:length], origins, n)
        if done:
            rw.drop(*chain[:length])
            changed = True
    return changed


def _rewrite(rw: Rewriter, block, x: Value, chain: list[Operation], origins: list[int], n: int) -> bool:
    last = chain[-1]
    dropped = [a for a in range(n) if a not in origins]
    made = [i for i, o in enumerate(origins) if o == _NEW]
    cur = x
    if dropped:
        axes = rw.constant(block, np.array(dropped, np.int64), stem="axes")
        cur = rw.build(block, "Squeeze", [cur, axes], before=last, stem=last.outputs[0].name).outputs[0]
    if made:
        axes = rw.constant(block, np.array(made, np.int64), stem="axes")
        cur = rw.build(block, "Unsqueeze", [cur, axes], before=last, stem=last.outputs[0].name).outputs[0]
    return rw.substitute(last.outputs[0], cur, block)
