"""Which Conv outputs are stored straight into their slice of a Concat's output, so that the Concat copies nothing for them.

Rule: ``y = Conv(x, w[, b])`` whose only reader is ``z = Concat(..., y, ...)`` along axis 1 (the
channels, NCHW) → the Conv's kernels store image ``n`` of ``y`` at ``z[n, c0 : c0 + M]`` (an
element offset and an image stride in ``z``'s buffer; ``y`` becomes a view of ``z``), and the
Concat launches its copy only for its other inputs. A SqueezeNet fire module's two expand Convs
then write its output with no copy launch.

Before: ``%a = Conv(X=%s, W=%w1)``; ``%b = Conv(X=%s, W=%w3)``; ``%z = Concat(%a, %b, axis=1)``
After:  the same steps; ``%a`` and ``%b`` are views of ``%z`` at channels 0 and M1, and the Concat
records no launch.

Negative cases (the Conv writes a buffer of its own and the Concat copies it):
- ``y`` is read by another step, a branch or loop body, twice by the Concat, or is a result or an
  input of the plan: it must exist on its own;
- the Concat or the Conv sits in a branch or loop body, or the Concat is along another axis;
- the Conv runs as ``conv_direct`` (one kernel indexing a whole tensor), adds a residual, or runs
  as per-group GEMMs with a bias added afterwards (``add_bias`` indexes a whole tensor): decided
  by the Conv's launcher (``ops/conv.py``);
- the plan mixes precisions (a step may read ``y`` through a conversion), ``y`` and ``z`` are
  stored in different dtypes, or a shape of the Concat's
  inputs is not known when the Conv is recorded (a symbolic plan that learns it later).
Numerics are unchanged: the same kernels compute the same values, stored elsewhere.
"""

from __future__ import annotations

import math


def _reads(steps: list[dict], into: dict[int, int]) -> None:
    """Count in ``into`` every read of a value id by ``steps`` and their sub-plans (an If's
    branches, a Loop's body: their inputs and results count as reads)."""
    for step in steps:
        for v in step.get("inputs", ()):
            if v is not None:
                into[v] = into.get(v, 0) + 1
        subs = [*step.get("branches", ()), *([step["body"]] if "body" in step else [])]
        for sub in subs:
            for v in (*sub.get("inputs", ()), *sub.get("outputs", ())):
                if v is not None:
                    into[v] = into.get(v, 0) + 1
            _reads(sub.get("ops", []), into)


def concat_slots(plan: dict) -> dict[int, tuple[int, tuple[int, ...], int]]:
    """Conv output id → (the Concat's output id, the Concat's inputs, its axis) for each Conv output that
    the rule may store into its Concat (the launcher decides by the shapes and strategy)."""
    if plan.get("fp32"):  # mixed precision: a step may convert its inputs first (builder._converted)
        return {}
    steps = plan["ops"]
    reads: dict[int, int] = {}
    _reads(steps, reads)
    ends = {int(v) for v in (*plan["inputs"], *plan["outputs"])}
    convs = {s["outputs"][0] for s in steps if s["type"] == "Conv" and len(s["outputs"]) == 1}
    slots = {}
    for s in steps:
        if s["type"] != "Concat" or len(s["outputs"]) != 1 or s["outputs"][0] is None:
            continue
        ins, axis = tuple(s["inputs"]), int(s.get("attributes", {}).get("axis", 0))
        for v in ins:
            if v in convs and v not in ends and reads.get(v) == 1 and ins.count(v) == 1:
                slots[v] = (s["outputs"][0], ins, axis)
    return slots


def slot(b, v: int) -> tuple[int, int, int] | None:
    """(the Concat's output id, element offset of image 0 of ``v`` in it, elements between
    images) when Conv output ``v`` may be stored into its Concat's output, else None."""
    found = b.concat_slots.get(v)
    if found is None:
        return None
    out, ins, axis = found
    shapes = [b.shape(x) for x in ins]
    if any(s is None or not all(type(d) is int for d in s) for s in shapes):
        return None
    rank = len(shapes[0])
    if rank < 2 or any(len(s) != rank or s[:1] + s[2:] != shapes[0][:1] + shapes[0][2:] for s in shapes):
        return None
    if axis % rank != 1:
        return None
    if b.storage(v) != b.storage(out) or b.dtype(v) != b.dtype(out):
        return None
    inner = math.prod(shapes[0][2:])
    before = sum(s[1] for s in shapes[: ins.index(v)])
    return out, before * inner, sum(s[1] for s in shapes) * inner
