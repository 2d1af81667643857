"""cleanup::dead_code_elimination."""

import numpy as np

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::dead_code_elimination"]


def test_unused_ops_and_weights_go():
    data = model(
        [node("MatMul", ["x", "w"], ["m"]), node("Relu", ["m"], ["unused"]), node("Sigmoid", ["x"], ["y"])],
        {"x": (F32, [2, 4])},
        {"y": (F32, [2, 4])},
        {"w": rand(4, 2)},
    )
    out = check(data, P, {"x": rand(2, 4)})
    assert op_types(out) == {"Sigmoid": 1}
    assert not out.main.body.constants


def test_outputs_and_what_they_read_stay():
    data = model(
        [node("Relu", ["x"], ["a"]), node("Neg", ["a"], ["b"]), node("Sigmoid", ["a"], ["y"])],
        {"x": (F32, [3])},
        {"y": (F32, [3]), "b": (F32, [3])},
    )
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)


def test_an_if_whose_branch_reads_a_value_keeps_it():
    from onnx import helper

    then = helper.make_graph(
        [node("Neg", ["a"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F32, [3])]
    )
    other = helper.make_graph(
        [node("Abs", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F32, [3])]
    )
    data = model(
        [
            node("Relu", ["x"], ["a"]),
            node("Sigmoid", ["x"], ["dead"]),
            node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        {"x": (F32, [3]), "c": (9, [])},
        {"y": (F32, [3])},
    )
    out = check(data, P, {"x": rand(3), "c": np.array(True)})
    assert op_types(out) == {"Relu": 1, "If": 1, "Neg": 1, "Abs": 1}
