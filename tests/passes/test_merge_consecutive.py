"""optimize_repeat_ops::merge_consecutive_{reshapes,transposes,relus,paddings}."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

I64 = np.int64
RESHAPES = ["optimize_repeat_ops::merge_consecutive_reshapes"]
TRANSPOSES = ["optimize_repeat_ops::merge_consecutive_transposes"]
RELUS = ["optimize_repeat_ops::merge_consecutive_relus"]
PADDINGS = ["optimize_repeat_ops::merge_consecutive_paddings"]


def test_reshapes_merge():
    data = model(
        [
            node("Reshape", ["x", "s1"], ["a"]),
            node("Reshape", ["a", "s2"], ["b"]),
            node("Flatten", ["b"], ["y"]),
        ],
        {"x": (F32, [2, 3, 4])},
        {"y": (F32, None)},
        {"s1": np.array([2, 12], I64), "s2": np.array([0, 3, 4], I64)},
    )
    out = check(data, RESHAPES, {"x": rand(2, 3, 4)})
    assert op_types(out) == {"Reshape": 1}


def test_reshape_with_another_reader_stays():
    data = model(
        [node("Reshape", ["x", "s1"], ["a"]), node("Reshape", ["a", "s2"], ["y"]), node("Neg", ["a"], ["z"])],
        {"x": (F32, [2, 3, 4])},
        {"y": (F32, None), "z": (F32, None)},
        {"s1": np.array([2, 12], I64), "s2": np.array([24], I64)},
    )
    original, out = optimized(data, RESHAPES)
    assert op_types(out) == op_types(original)


@pytest.mark.parametrize("p1, p2, left", [([2, 1, 0], [1, 0, 2], 1), ([0, 2, 1], [0, 2, 1], 0)])
def test_transposes_merge_or_cancel(p1, p2, left):
    data = model(
        [
            node("Transpose", ["x"], ["a"], perm=p1),
            node("Transpose", ["a"], ["t"], perm=p2),
            node("Neg", ["t"], ["y"]),
        ],
        {"x": (F32, [2, 3, 4])},
        {"y": (F32, None)},
    )
    out = check(data, TRANSPOSES, {"x": rand(2, 3, 4)})
    assert op_types(out)["Transpose"] == left


def test_transpose_pair_of_an_input_returned_as_output_stays():
    data = model(
        [node("Transpose", ["x"], ["a"], perm=[1, 0]), node("Transpose", ["a"], ["y"], perm=[1, 0])],
        {"x": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
    )
    out = check(data, TRANSPOSES, {"x": rand(2, 3)})
    assert op_types(out) == {"Transpose": 2}


def test_relus_merge_and_a_relu_after_another_op_stays():
    data = model(
        [
            node("Relu", ["x"], ["a"]),
            node("Relu", ["a"], ["b"]),
            node("Neg", ["b"], ["n"]),
            node("Relu", ["n"], ["y"]),
        ],
        {"x": (F32, [5])},
        {"y": (F32, [5])},
    )
    out = check(data, RELUS, {"x": rand(5)})
    assert op_types(out) == {"Relu": 2, "Neg": 1}


def _pads(mode1, pads1, mode2, pads2, value2=None):
    inits = {"p1": np.array(pads1, I64), "p2": np.array(pads2, I64)}
    second = ["a", "p2"]
    if value2 is not None:
        inits["v"] = np.array(value2, np.float32)
        second.append("v")
    return model(
        [node("Pad", ["x", "p1"], ["a"], mode=mode1), node("Pad", second, ["y"], mode=mode2)],
        {"x": (F32, [1, 2, 4, 5])},
        {"y": (F32, None)},
        inits,
    )


@pytest.mark.parametrize(
    "m1, p1, m2, p2",
    [
        ("constant", [0, 0, 1, 0, 0, 0, 1, 0], "constant", [0, 0, 0, 2, 0, 0, 1, 1]),
        ("reflect", [0, 0, 1, 0, 0, 0, 1, 0], "reflect", [0, 0, 0, 1, 0, 0, 0, 2]),
        ("edge", [0, 0, 2, 0, 0, 0, 0, 0], "edge", [0, 0, 0, 1, 0, 0, 0, 1]),
    ],
)
def test_paddings_merge(m1, p1, m2, p2):
    out = check(_pads(m1, p1, m2, p2), PADDINGS, {"x": rand(1, 2, 4, 5)})
    assert op_types(out) == {"Pad": 1}


@pytest.mark.parametrize(
    "m1, p1, m2, p2, v2",
    [
        ("constant", [0, 0, 1, 0, 0, 0, 1, 0], "constant", [0, 0, 1, 0, 0, 0, 1, 0], 1.0),  # other value
        ("reflect", [0, 0, 1, 0, 0, 0, 1, 0], "reflect", [0, 0, 1, 0, 0, 0, 0, 0], None),  # same axis
        ("constant", [0, 0, 1, 0, 0, 0, 1, 0], "reflect", [0, 0, 0, 1, 0, 0, 0, 1], None),  # other mode
        ("constant", [0, 0, -1, 0, 0, 0, 0, 0], "constant", [0, 0, 1, 0, 0, 0, 0, 0], None),  # a crop
    ],
)
def test_paddings_that_do_not_compose_stay(m1, p1, m2, p2, v2):
    data = _pads(m1, p1, m2, p2, v2)
    out = check(data, PADDINGS, {"x": rand(1, 2, 4, 5)})
    assert op_types(out) == {"Pad": 2}
