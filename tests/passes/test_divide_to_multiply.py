"""optimize_elementwise_binary::divide_to_multiply."""

import numpy as np

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_elementwise_binary::divide_to_multiply"]


def test_division_by_a_constant_becomes_a_product():
    data = model(
        [node("Div", ["x", "c"], ["y"])], {"x": (F32, [2, 3])}, {"y": (F32, [2, 3])}, {"c": rand(3) + 3}
    )
    out = check(data, P, {"x": rand(2, 3)}, rtol=1e-6, atol=0)
    assert op_types(out) == {"Mul": 1}
    assert [v.name for v in out.main.outputs] == ["y"]


def test_integer_zero_or_non_constant_divisors_stay():
    for inits, inputs in [
        ({"c": np.array([1, 0, 2], np.float32)}, {"x": (F32, [3])}),
        ({}, {"x": (F32, [3]), "c": (F32, [3])}),
    ]:
        data = model([node("Div", ["x", "c"], ["y"])], inputs, {"y": (F32, [3])}, inits)
        _original, out = optimized(data, P)
        assert op_types(out) == {"Div": 1}
    data = model(
        [node("Div", ["x", "c"], ["y"])],
        {"x": (6, [3])},
        {"y": (6, [3])},
        {"c": np.array([2, 3, 4], np.int32)},
    )
    out = check(data, P, {"x": np.array([-7, 8, 9], np.int32)})
    assert op_types(out) == {"Div": 1}
