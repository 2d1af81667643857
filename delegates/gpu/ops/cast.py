"""CastLike: Cast to the dtype of a second input, run as a one-node elementwise kernel.

CastLike reads only the dtype of its second input, never its values or shape (which need not
broadcast with the first). It is kept out of the elementwise table on purpose: a fused tree
broadcasts every leaf to its output, so that second input must not become a leaf of one. The
step runs the generated kernel of a Cast to that dtype instead (the same source as a Cast step,
so the build cache serves both).
"""

from __future__ import annotations

import numpy as np

from ...backend import OpCapability, Support
from ..api import MAX_RANK
from . import elementwise

CAPS = {
    "CastLike": OpCapability(frozenset(elementwise._DATATYPE[t] for t in elementwise.ANY), max_rank=MAX_RANK),
}


def _check(op) -> Support | None:
    like = op.inputs[1] if len(op.inputs) > 1 else None
    if like is None:
        return Support(False, "CastLike without its target_type input")
    got = np.dtype(like.type.dtype.numpy).name
    want = np.dtype(op.outputs[0].type.dtype.numpy).name
    if got != want:
        return Support(False, f"CastLike to {got}, its output is {want}")
    return None


CHECKS = {"CastLike": _check}


def _launch(b, step: dict) -> None:
    (x, _like), (out,) = step["inputs"], step["outputs"]
    to = elementwise._DATATYPE[b.dtype(out).name]
    node = {"type": "Cast", "name": step.get("name"), "attributes": {"to": int(to)}, "args": [["in", 0]]}
    tree = {**step, "type": "Fused", "inputs": [x], "nodes": [node]}
    elementwise.launch_fused(b, tree)


LAUNCH = {"CastLike": _launch}
