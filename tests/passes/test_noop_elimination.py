"""cleanup::noop_elimination."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::noop_elimination"]
X = {"x": rand(2, 3, 4)}
I64 = np.int64


def _one(op, *inputs, init=None, **attrs):
    return model(
        [node(op, ["x", *inputs], ["n"], **attrs), node("Sigmoid", ["n"], ["y"])],
        {"x": (F32, [2, 3, 4])},
        {"y": (F32, None)},
        init,
    )


@pytest.mark.parametrize(
    "op, inputs, init, attrs",
    [
        ("Identity", [], None, {}),
        ("Reshape", ["s"], {"s": np.array([2, 3, 4], I64)}, {}),
        ("Reshape", ["s"], {"s": np.array([0, -1, 4], I64)}, {}),
        ("Transpose", [], None, {"perm": [0, 1, 2]}),
        ("Add", ["z"], {"z": np.zeros(4, np.float32)}, {}),
        ("Sub", ["z"], {"z": np.array(0, np.float32)}, {}),
        ("Mul", ["o"], {"o": np.ones((1, 1), np.float32)}, {}),
        ("Div", ["o"], {"o": np.array(1, np.float32)}, {}),
        ("Pad", ["p"], {"p": np.zeros(6, I64)}, {}),
        ("Slice", ["st", "en"], {"st": np.array([0], I64), "en": np.array([100], I64)}, {}),
        ("Cast", [], None, {"to": F32}),
        ("Expand", ["s"], {"s": np.array([3, 1], I64)}, {}),
        ("Tile", ["s"], {"s": np.array([1, 1, 1], I64)}, {}),
        ("Dropout", [], None, {}),
        ("Concat", [], None, {"axis": 0}),
    ],
)
def test_noop_goes(op, inputs, init, attrs):
    out = check(_one(op, *inputs, init=init, **attrs), P, X)
    assert op_types(out) == {"Sigmoid": 1}


def test_mul_by_one_on_the_left_goes():
    data = model(
        [node("Mul", ["o", "x"], ["n"]), node("Sigmoid", ["n"], ["y"])],
        {"x": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
        {"o": np.array(1, np.float32)},
    )
    assert op_types(check(data, P, {"x": rand(2, 3)})) == {"Sigmoid": 1}


@pytest.mark.parametrize(
    "op, inputs, init, attrs",
    [
        ("Reshape", ["s"], {"s": np.array([6, 4], I64)}, {}),
        ("Transpose", [], None, {"perm": [0, 2, 1]}),
        ("Add", ["z"], {"z": np.zeros((5, 2, 3, 4), np.float32)}, {}),  # broadcast grows the shape
        ("Add", ["z"], {"z": np.full(4, 1e-3, np.float32)}, {}),
        ("Sub", ["z"], {"z": np.array([0, 0, 0, 1e-3], np.float32)}, {}),
        (
            "Slice",
            ["st", "en", "ax", "sp"],
            {
                "st": np.array([-1], I64),
                "en": np.array([-100], I64),
                "ax": np.array([0], I64),
                "sp": np.array([-1], I64),
            },
            {},
        ),
        ("Pad", ["p"], {"p": np.array([0, 0, 1, 0, 0, 0], I64)}, {}),
    ],
)
def test_op_that_changes_something_stays(op, inputs, init, attrs):
    original, out = optimized(_one(op, *inputs, init=init, **attrs), P)
    assert op_types(out) == op_types(original)


def test_sub_from_zero_stays():
    data = model(
        [node("Sub", ["z", "x"], ["y"])], {"x": (F32, [3])}, {"y": (F32, [3])}, {"z": np.zeros(3, np.float32)}
    )
    out = check(data, P, {"x": rand(3)})
    assert op_types(out) == {"Sub": 1}


def test_function_output_of_an_input_passthrough_stays():
    data = model([node("Identity", ["x"], ["y"])], {"x": (F32, [3])}, {"y": (F32, [3])})
    _original, out = optimized(data, P)
    assert op_types(out) == {"Identity": 1}
    assert [v.name for v in out.main.outputs] == ["y"]


def test_function_output_keeps_its_name_when_its_producer_takes_over():
    data = model(
        [node("Relu", ["x"], ["r"]), node("Identity", ["r"], ["y"])], {"x": (F32, [3])}, {"y": (F32, [3])}
    )
    out = check(data, P, {"x": rand(3)})
    assert op_types(out) == {"Relu": 1}
    assert [v.name for v in out.main.outputs] == ["y"]


def test_identity_a_branch_returns_of_an_outer_value_stays():
    """A branch must not end up returning a value it only captures (the lowering of a delegate
    does not carry such a value in), so the Identity that defines it in the branch stays."""
    from onnx import TensorProto, helper

    def branch(name, op):
        return helper.make_graph(
            [node(op, ["x"], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", F32, [2, 3])],
        )

    data = model(
        [node("If", ["c"], ["y"], then_branch=branch("then", "Identity"), else_branch=branch("else", "Neg"))],
        {"c": (TensorProto.BOOL, []), "x": (F32, [2, 3])},
        {"y": (F32, None)},
    )
    for c in (True, False):
        out = check(data, ["cleanup::noop_elimination"], {"c": np.array(c), "x": rand(2, 3)}, rtol=0, atol=0)
        assert op_types(out)["Identity"] == 1
