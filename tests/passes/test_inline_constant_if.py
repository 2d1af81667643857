"""cleanup::inline_constant_if, with const_elimination's Gather of static dims from a Shape."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import offload
from offload import runtime
from tests.delegates.opencl_support import needs_opencl

from .helpers import F32, model, node, onnxruntime_run, op_types, optimized, rand

P = ["cleanup::const_elimination", "cleanup::inline_constant_if"]
I64 = np.int64


def _squeeze_if(axis: int, dim: int) -> bytes:
    """An exporter's ``if u.shape[axis] == dim: u = u.squeeze(1)`` on u = x[:, None, :] of
    x: (1, T), then y = u @ w. The If's branches give ranks 2 and 3, so its output has no rank."""
    vi = helper.make_tensor_value_info
    then = helper.make_graph([node("Squeeze", ["u", "one"], ["t"])], "then", [], [vi("t", F32, None)])
    other = helper.make_graph([node("Identity", ["u"], ["e"])], "else", [], [vi("e", F32, None)])
    nodes = [
        node("Unsqueeze", ["x", "one"], ["u"]),
        node("Shape", ["u"], ["s"]),
        node("Gather", ["s", "axis"], ["d"], axis=0),
        node("Equal", ["d", "dim"], ["c"]),
        node("If", ["c"], ["v"], then_branch=then, else_branch=other),
        node("MatMul", ["v", "w"], ["y"]),
    ]
    inits = {
        "one": np.array([1], I64),
        "axis": np.array([axis], I64),
        "dim": np.array([dim], I64),
        "w": rand(1, 4, seed=2),
    }
    m = onnx.load_from_string(model(nodes, {"x": (F32, [1, "T"])}, {"y": (F32, None)}, inits))
    # the shape test reads a 1 of u: the MatMul multiplies (1, T) or (1, 1, T) by w, T = 1 here
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1
    return m.SerializeToString()


def _check(data, program):
    for seed in (3, 4):
        feeds = {"x": rand(1, 1, seed=seed)}
        want = onnxruntime_run(data, feeds)["y"]
        got = offload.evaluate(program, feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_static_shape_test_takes_its_branch_and_types_follow():
    for dim, kept in ((1, "Squeeze"), (5, "Identity")):
        data = _squeeze_if(axis=1, dim=dim)
        original, out = optimized(data, P)
        assert original.main.body.operations[-1].outputs[0].type.shape is None  # rank unknown
        assert op_types(out)["If"] == 0 and op_types(out)[kept] == 1
        y = out.main.body.operations[-1].outputs[0]
        assert len(y.type.shape) == (2 if dim == 1 else 3)
        _check(data, out)


def test_a_symbolic_dim_keeps_the_if():
    vi = helper.make_tensor_value_info
    then = helper.make_graph([node("Neg", ["x"], ["t"])], "then", [], [vi("t", F32, None)])
    other = helper.make_graph([node("Abs", ["x"], ["e"])], "else", [], [vi("e", F32, None)])
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "axis"], ["d"], axis=0),
        node("Equal", ["d", "dim"], ["c"]),
        node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = {"axis": np.array([1], I64), "dim": np.array([3], I64)}
    data = model(nodes, {"x": (F32, [2, "T"])}, {"y": (F32, None)}, inits)
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
    for t in (3, 4):
        feeds = {"x": rand(2, t, seed=t)}
        np.testing.assert_array_equal(offload.evaluate(out, feeds)["y"], onnxruntime_run(data, feeds)["y"])


def test_an_if_that_returns_a_function_output_stays():
    vi = helper.make_tensor_value_info
    then = helper.make_graph([node("Neg", ["x"], ["t"])], "then", [], [vi("t", F32, [2])])
    other = helper.make_graph([node("Abs", ["x"], ["e"])], "else", [], [vi("e", F32, [2])])
    nodes = [node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    data = model(nodes, {"x": (F32, [2])}, {"y": (F32, [2])}, {"c": np.array([True])})
    _, out = optimized(data, P)
    assert op_types(out)["If"] == 1
    feeds = {"x": rand(2, seed=1)}
    np.testing.assert_array_equal(offload.evaluate(out, feeds)["y"], onnxruntime_run(data, feeds)["y"])


def test_branch_names_that_a_sibling_block_has_are_renamed():
    vi = helper.make_tensor_value_info
    then = helper.make_graph([node("Neg", ["x"], ["t"])], "then", [], [vi("t", F32, [2])])
    other = helper.make_graph([node("Abs", ["x"], ["e"])], "else", [], [vi("e", F32, [2])])
    # a second If, on an input, whose branch names a value "t" too
    then2 = helper.make_graph([node("Relu", ["x"], ["t"])], "then2", [], [vi("t", F32, [2])])
    other2 = helper.make_graph([node("Floor", ["x"], ["e"])], "else2", [], [vi("e", F32, [2])])
    nodes = [
        node("If", ["c"], ["a"], then_branch=then, else_branch=other),
        node("If", ["b"], ["z"], then_branch=then2, else_branch=other2),
        node("Add", ["a", "z"], ["y"]),
    ]
    data = model(
        nodes, {"x": (F32, [2]), "b": (TensorProto.BOOL, [])}, {"y": (F32, [2])}, {"c": np.array(True)}
    )
    _, out = optimized(data, P)
    assert op_types(out)["If"] == 1
    for b in (True, False):
        feeds = {"x": rand(2, seed=1), "b": np.array(b)}
        np.testing.assert_array_equal(offload.evaluate(out, feeds)["y"], onnxruntime_run(data, feeds)["y"])


@needs_opencl
def test_the_ops_after_a_static_shape_test_run_on_opencl(tmp_path):
    data = _squeeze_if(axis=1, dim=1)
    program = offload.load(data)
    kept = offload.to_backend(program, "opencl", passes=["cleanup::const_elimination"])
    assert "MatMul" in op_types(kept)  # refused: its input's rank is unknown
    lowered = offload.to_backend(program, "opencl", passes=P)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"), strict=True)
    feeds = {"x": rand(1, 1, seed=3)}
    want = onnxruntime_run(data, feeds)["y"]
    np.testing.assert_allclose(module.run(feeds)["y"], want, rtol=1e-6, atol=1e-6)
