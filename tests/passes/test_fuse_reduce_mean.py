"""cleanup::fuse_reduce_mean."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::fuse_reduce_mean"]


def _model(op, k, axes=(1,), other_reader=False):
    nodes = [node("ReduceSum", ["x", "axes"], ["s"], keepdims=1), node(op, ["s", "k"], ["y"])]
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Neg", ["s"], ["z"]))
        outputs["z"] = (F32, None)
    return model(
        nodes,
        {"x": (F32, [2, 8, 3])},
        outputs,
        {"axes": np.array(axes, np.int64), "k": np.array(k, np.float32)},
    )


@pytest.mark.parametrize("op, k, axes", [("Div", 8, (1,)), ("Mul", 1 / 24, (1, 2)), ("Div", 48, (0, 1, 2))])
def test_sum_over_count_is_mean(op, k, axes):
    out = check(_model(op, k, axes), P, {"x": rand(2, 8, 3)})
    assert op_types(out) == {"ReduceMean": 1}


@pytest.mark.parametrize(
    "op, k, other", [("Div", 7, False), ("Mul", 8, False), ("Div", 8, True), ("Sub", 8, False)]
)
def test_other_divisor_or_reader_stays(op, k, other):
    original, out = optimized(_model(op, k, other_reader=other), P)
    assert op_types(out) == op_types(original)
