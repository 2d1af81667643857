"""cleanup::remove_redundant_ops."""

import numpy as np

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::remove_redundant_ops"]


def test_same_op_on_same_inputs_and_equal_constants_is_computed_once():
    c = rand(3)
    data = model(
        [node("Mul", ["x", "c1"], ["a"]), node("Mul", ["x", "c2"], ["b"]), node("Add", ["a", "b"], ["y"])],
        {"x": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
        {"c1": c, "c2": c.copy()},
    )
    out = check(data, P, {"x": rand(2, 3)})
    assert op_types(out) == {"Mul": 1, "Add": 1}


def test_different_attributes_or_inputs_or_random_ops_stay():
    data = model(
        [
            node("Softmax", ["x"], ["a"], axis=0),
            node("Softmax", ["x"], ["b"], axis=1),
            node("Mul", ["x", "c1"], ["m1"]),
            node("Mul", ["x", "c2"], ["m2"]),
            node("RandomNormalLike", ["x"], ["r1"]),
            node("RandomNormalLike", ["x"], ["r2"]),
            node("Sum", ["a", "b", "m1", "m2"], ["y"]),
            node("Sub", ["r1", "r2"], ["z"]),
        ],
        {"x": (F32, [2, 3])},
        {"y": (F32, [2, 3]), "z": (F32, [2, 3])},
        {"c1": rand(3), "c2": rand(3, seed=1)},
    )
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)


def test_two_function_outputs_stay_two():
    data = model(
        [node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["b"])],
        {"x": (F32, [3])},
        {"a": (F32, [3]), "b": (F32, [3])},
    )
    out = check(data, P, {"x": rand(3)})
    assert op_types(out) == {"Relu": 2}


def test_later_function_output_takes_over_the_earlier_op():
    data = model(
        [node("Relu", ["x"], ["a"]), node("Relu", ["x"], ["y"]), node("Neg", ["a"], ["z"])],
        {"x": (F32, [3])},
        {"y": (F32, [3]), "z": (F32, [3])},
    )
    out = check(data, P, {"x": np.array([-1, 0, 2], np.float32)})
    assert op_types(out) == {"Relu": 1, "Neg": 1}
