"""cleanup::topological_reorder."""

from .helpers import F32, check, model, node, rand

P = ["cleanup::topological_reorder"]


def test_cast_and_transpose_move_to_their_first_reader():
    data = model(
        [
            node("Cast", ["x"], ["c"], to=10),
            node("Transpose", ["x"], ["t"], perm=[1, 0]),
            node("Relu", ["x"], ["a"]),
            node("Exp", ["a"], ["b"]),
            node("Mul", ["c", "c"], ["y"]),
            node("Add", ["t", "t"], ["z"]),
        ],
        {"x": (F32, [2, 4])},
        {"y": (10, [2, 4]), "z": (F32, [4, 2]), "b": (F32, [2, 4])},
    )
    out = check(data, P, {"x": rand(2, 4)}, rtol=1e-3, atol=1e-3)
    assert [op.op_type for op in out.main.body.operations] == [
        "Relu",
        "Exp",
        "Cast",
        "Mul",
        "Transpose",
        "Add",
    ]


def test_an_op_already_next_to_its_reader_stays():
    data = model(
        [node("Relu", ["x"], ["a"]), node("Transpose", ["a"], ["t"]), node("Neg", ["t"], ["y"])],
        {"x": (F32, [2, 4])},
        {"y": (F32, [4, 2])},
    )
    out = check(data, P, {"x": rand(2, 4)})
    assert [op.op_type for op in out.main.body.operations] == ["Relu", "Transpose", "Neg"]
