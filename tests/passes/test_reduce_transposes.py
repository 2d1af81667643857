"""optimize_repeat_ops::reduce_transposes."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_repeat_ops::reduce_transposes"]
X = {"x": rand(1, 3, 4, 5, seed=3)}
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _sandwich(middle, inits, p1=NHWC, p2=NCHW, extra_reader=None):
    nodes = [node("Transpose", ["x"], ["t"], perm=p1), *middle, node("Transpose", ["m"], ["y"], perm=p2)]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, [1, 3, 4, 5])}, outputs, inits)


@pytest.mark.parametrize(
    "middle, inits, left",
    [
        ([node("Relu", ["t"], ["m"])], {}, {"Relu": 1}),
        (
            [node("Sigmoid", ["t"], ["s"]), node("Mul", ["c", "s"], ["a"]), node("Sub", ["a", "d"], ["m"])],
            {"c": rand(3, seed=1), "d": rand(4, 5, 3, seed=2)},
            {"Sigmoid": 1, "Mul": 1, "Sub": 1},
        ),
        (
            [node("Clip", ["t", "lo", "hi"], ["a"]), node("PRelu", ["a", "slope"], ["m"])],
            {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32), "slope": rand(3, seed=4)},
            {"Clip": 1, "PRelu": 1},
        ),
        ([node("Div", ["c", "t"], ["m"])], {"c": rand(1, 5, 1, seed=5) + 3}, {"Div": 1}),
    ],
)
def test_transpose_pair_cancels_through_elementwise_ops(middle, inits, left):
    out = check(_sandwich(middle, inits), P, X, rtol=1e-6, atol=1e-7)
    assert op_types(out) == left


def test_transpose_pair_that_does_not_cancel_becomes_one():
    out = check(_sandwich([node("Exp", ["t"], ["m"])], {}, p2=[0, 1, 3, 2]), P, X, rtol=1e-6, atol=1e-7)
    assert op_types(out) == {"Exp": 1, "Transpose": 1}


@pytest.mark.parametrize(
    "middle, inits, kw",
    [
        ([node("Relu", ["t"], ["m"])], {}, {"extra_reader": "t"}),
        ([node("Relu", ["t"], ["r"]), node("Neg", ["r"], ["m"])], {}, {"extra_reader": "r"}),
        ([node("Add", ["t", "c"], ["m"])], {"c": rand(2, 4, 5, 3, seed=1)}, {}),  # broadcast grows
        ([node("Softmax", ["t"], ["m"], axis=-1)], {}, {}),  # not elementwise: the axis matters
        ([node("Add", ["t", "t"], ["m"])], {}, {}),
    ],
)
def test_transposes_stay(middle, inits, kw):
    original, out = optimized(_sandwich(middle, inits, **kw), P)
    assert op_types(out) == op_types(original)


def test_non_constant_operand_stays():
    data = model(
        [
            node("Transpose", ["x"], ["t"], perm=NHWC),
            node("Add", ["t", "b"], ["m"]),
            node("Transpose", ["m"], ["y"], perm=NCHW),
        ],
        {"x": (F32, [1, 3, 4, 5]), "b": (F32, [3])},
        {"y": (F32, None)},
    )
    out = check(data, P, dict(X, b=rand(3, seed=2)), rtol=0, atol=0)
    assert op_types(out)["Transpose"] == 2
