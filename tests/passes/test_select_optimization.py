"""optimize_elementwise_binary::select_optimization."""

import numpy as np
import pytest
from onnx import TensorProto

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_elementwise_binary::select_optimization"]
B = TensorProto.BOOL


@pytest.mark.parametrize("cond, kept", [(np.array(True), "a"), (np.array([False, False, False]), "b")])
def test_a_constant_condition_picks_its_operand(cond, kept):
    data = model(
        [node("Where", ["c", "a", "b"], ["w"]), node("Relu", ["w"], ["y"])],
        {"a": (F32, [2, 3]), "b": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
        {"c": cond},
    )
    feeds = {"a": rand(2, 3), "b": rand(2, 3, seed=1)}
    out = check(data, P, feeds, rtol=0, atol=0)
    assert op_types(out) == {"Relu": 1}
    (relu,) = out.main.body.operations
    assert relu.inputs[0].name == kept


def test_a_broadcasting_where_becomes_an_expand():
    data = model(
        [node("Where", ["c", "a", "b"], ["y"])],
        {"a": (F32, [3]), "b": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
        {"c": np.array([True])},
    )
    out = check(data, P, {"a": rand(3), "b": rand(2, 3, seed=1)}, rtol=0, atol=0)
    assert op_types(out) == {"Expand": 1}


def test_the_same_value_on_both_sides_is_that_value():
    data = model(
        [node("Where", ["c", "a", "a"], ["w"]), node("Neg", ["w"], ["y"])],
        {"c": (B, [2, 3]), "a": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
    )
    out = check(data, P, {"c": rand(2, 3) > 0, "a": rand(2, 3)}, rtol=0, atol=0)
    assert op_types(out) == {"Neg": 1}


def test_a_mixed_or_non_constant_condition_stays():
    for inits, inputs in [
        ({"c": np.array([True, False, True])}, {}),
        ({}, {"c": (B, [3])}),
    ]:
        data = model(
            [node("Where", ["c", "a", "b"], ["y"])],
            {"a": (F32, [3]), "b": (F32, [3]), **inputs},
            {"y": (F32, [3])},
            inits,
        )
        _original, out = optimized(data, P)
        assert op_types(out) == {"Where": 1}
