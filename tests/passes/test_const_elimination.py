"""cleanup::const_elimination."""

import numpy as np

from offload.passes.cleanup import const_elimination as ce

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::const_elimination"]
I64 = np.int64


def test_shape_chain_of_a_static_model_disappears():
    data = model(
        [
            node("Shape", ["x"], ["s"]),
            node("Gather", ["s", "zero"], ["n"], axis=0),
            node("Unsqueeze", ["n", "zero1"], ["n1"]),
            node("Concat", ["n1", "minus1"], ["target"], axis=0),
            node("Reshape", ["x", "target"], ["y"]),
        ],
        {"x": (F32, [2, 3, 4])},
        {"y": (F32, None)},
        {"zero": np.array(0, I64), "zero1": np.array([0], I64), "minus1": np.array([-1], I64)},
    )
    out = check(data, P, {"x": rand(2, 3, 4)})
    assert op_types(out) == {"Reshape": 1}
    assert out.main.body.operations[0].inputs[1].const_value.tolist() == [2, -1]


def test_constant_of_shape_weight_is_folded():
    data = model(
        [
            node(
                "ConstantOfShape",
                ["s"],
                ["w"],
                value=__import__("onnx").numpy_helper.from_array(np.array([0.5], np.float32)),
            ),
            node("MatMul", ["x", "w"], ["y"]),
        ],
        {"x": (F32, [2, 8])},
        {"y": (F32, [2, 16])},
        {"s": np.array([8, 16], I64)},
    )
    out = check(data, P, {"x": rand(2, 8)})
    assert op_types(out) == {"MatMul": 1}


def test_dynamic_shape_and_non_constant_inputs_stay():
    data = model(
        [node("Shape", ["x"], ["s"]), node("Cast", ["s"], ["sf"], to=F32), node("Mul", ["x", "c"], ["y"])],
        {"x": (F32, ["N", 3])},
        {"y": (F32, ["N", 3]), "sf": (F32, [2])},
        {"c": rand(3)},
    )
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)


def test_function_output_is_not_made_a_constant():
    data = model([node("Add", ["a", "b"], ["y"])], {}, {"y": (F32, [3])}, {"a": rand(3), "b": rand(3)})
    _, out = optimized(data, P)
    assert op_types(out) == {"Add": 1} and [v.name for v in out.main.outputs] == ["y"]


def test_size_limit_and_random_ops():
    data = model(
        [
            node("Add", ["a", "b"], ["s"]),
            node("RandomNormalLike", ["a"], ["r"]),
            node("Mul", ["x", "s"], ["m"]),
            node("Add", ["m", "r"], ["y"]),
        ],
        {"x": (F32, [64])},
        {"y": (F32, [64])},
        {"a": rand(64), "b": rand(64)},
    )
    old = ce.MAX_ELEMENTS
    try:
        ce.MAX_ELEMENTS = 32
        _, out = optimized(data, P)
    finally:
        ce.MAX_ELEMENTS = old
    assert op_types(out) == {"Add": 2, "Mul": 1, "RandomNormalLike": 1}
    _, out = optimized(data, P)
    assert op_types(out) == {"Add": 1, "Mul": 1, "RandomNormalLike": 1}
