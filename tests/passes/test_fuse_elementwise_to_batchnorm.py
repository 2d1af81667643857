"""optimize_elementwise_binary::fuse_elementwise_to_batchnorm."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_elementwise_binary::fuse_elementwise_to_batchnorm"]
X = {"x": rand(2, 4, 3, 5, seed=3)}


def _scale_shift(s, t, *, second="Add", swap=False, other_reader=False, shape=(2, 4, 3, 5)):
    nodes = [
        node("Mul", ["s", "x"] if swap else ["x", "s"], ["m"]),
        node(second, ["t", "m"] if swap and second == "Add" else ["m", "t"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Relu", ["m"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, list(shape))}, outputs, {"s": s, "t": t})


@pytest.mark.parametrize(
    "s, t, second, swap",
    [
        (rand(4, 1, 1), rand(1, 4, 1, 1, seed=1), "Add", False),
        (rand(1, 4, 1, 1), rand(4, 1, 1, seed=1), "Sub", False),
        (np.array(1.5, np.float32), rand(4, 1, 1, seed=1), "Add", True),
    ],
)
def test_per_channel_scale_and_shift_become_a_batchnorm(s, t, second, swap):
    out = check(_scale_shift(s, t, second=second, swap=swap), P, X, rtol=1e-6, atol=1e-6)
    assert op_types(out) == {"BatchNormalization": 1}
    assert [v.name for v in out.main.outputs] == ["y"]


def test_wrong_axis_other_reader_or_low_rank_stay():
    cases = [
        _scale_shift(rand(5), rand(4, 1, 1, seed=1)),  # varies along the last axis
        _scale_shift(rand(4, 1, 1), rand(4, 1, 1, seed=1), other_reader=True),
        _scale_shift(rand(4, 1, 1), rand(1, 4, 3, 1, seed=1)),  # the shift varies along H too
        _scale_shift(rand(4), rand(4, seed=1), shape=(2, 4)),  # rank 2
    ]
    for data in cases:
        _original, out = optimized(data, P)
        assert "BatchNormalization" not in op_types(out)
    # x - t·s has the constant first in the Sub: not this rule
    data = model(
        [node("Mul", ["x", "s"], ["m"]), node("Sub", ["t", "m"], ["y"])],
        {"x": (F32, [2, 4, 3, 5])},
        {"y": (F32, None)},
        {"s": rand(4, 1, 1), "t": rand(4, 1, 1, seed=1)},
    )
    _original, out = optimized(data, P)
    assert op_types(out) == {"Mul": 1, "Sub": 1}
