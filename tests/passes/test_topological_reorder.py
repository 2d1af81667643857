"""cleanup::topological_reorder."""

from onnx import TensorProto, helper

import offload

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


def test_a_constant_of_shape_moves_to_its_reader_and_the_arena_shrinks():
    # the light models' way: every weight made by ConstantOfShape up front, then the layers. The
    # shape is read from the input (of a constant shape the runtime would make the weights once,
    # at the first run, with no arena place: runtime/load_time.py, _find_load_time).
    n = 64
    nodes = [node("Shape", ["x"], ["s"])]
    nodes += [node("ConstantOfShape", ["s"], [f"w{k}"], value=_splat(0.01 * (k + 1))) for k in range(4)]
    prev = "x"
    for k in range(4):
        nodes.append(node("MatMul", [prev, f"w{k}"], [f"h{k}"]))
        prev = f"h{k}"
    data = model(nodes, {"x": (F32, [n, n])}, {prev: (F32, [n, n])})
    out = check(data, P, {"x": rand(n, n)})
    assert [op.op_type for op in out.main.body.operations] == ["Shape"] + ["ConstantOfShape", "MatMul"] * 4
    arenas = []
    for program in (offload.load(data), out):
        method = offload.runtime.load(offload.save(program)).method("forward")
        arenas.append(method.arena_bytes)
    assert arenas[1] < arenas[0]  # each weight lives only while its MatMul runs


def _splat(value: float):
    return helper.make_tensor("value", TensorProto.FLOAT, [1], [value])


def test_one_run_is_a_fixed_point():
    """A Cast read by a Transpose, and Transposes read only by the results, settle in one run
    (a second run of the pass changes nothing: the default pipeline's rounds end)."""
    from offload.passes import run_passes

    data = model(
        [
            node("Cast", ["x"], ["c"], to=1),
            node("Transpose", ["c"], ["t"], perm=[1, 0]),
            node("Transpose", ["x"], ["u"], perm=[1, 0]),
            node("Transpose", ["x"], ["v"], perm=[1, 0]),
            node("Relu", ["x"], ["a"]),
            node("Exp", ["a"], ["b"]),
            node("Add", ["t", "t"], ["z"]),
        ],
        {"x": (F32, [2, 4])},
        {"z": (F32, [4, 2]), "b": (F32, [2, 4]), "u": (F32, [4, 2]), "v": (F32, [4, 2])},
    )
    out = check(data, P, {"x": rand(2, 4)})
    assert [op.op_type for op in out.main.body.operations][:4] == ["Relu", "Exp", "Cast", "Transpose"]
    assert not any(r.changed for r in run_passes(out, P))
