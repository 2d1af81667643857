"""cleanup::hoist_nested_constants."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import offload
from offload import runtime
from tests.delegates.opencl_support import needs_opencl

from .helpers import F32, model, node, onnxruntime_run, optimized

P = ["cleanup::hoist_nested_constants"]
N = 5000  # above the GPU backends' limit for a constant inside a branch


def _if_model(same_names=True, returned=False):
    """y = If(c, x * w_then + 1, x - w_else): each branch holds its own weight of N elements,
    both named "w" when ``same_names``; ``returned``: the else branch returns its constant."""
    rng = np.random.default_rng(7)
    w_then = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "w")
    w_else = numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "w" if same_names else "v")
    one = numpy_helper.from_array(np.ones(N, np.float32), "one")
    out = [helper.make_tensor_value_info("r", F32, [N])]
    then = helper.make_graph(
        [node("Mul", ["x", "w"], ["t"]), node("Add", ["t", "one"], ["r"])], "then", [], out, [w_then, one]
    )
    if returned:
        other = helper.make_graph(
            [], "else", [], [helper.make_tensor_value_info(w_else.name, F32, [N])], [w_else]
        )
    else:
        other = helper.make_graph([node("Sub", ["x", w_else.name], ["r"])], "else", [], out, [w_else])
    nodes = [node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    # "y" outside: a later outer value named like nothing inside
    return model(nodes, {"c": (TensorProto.BOOL, []), "x": (F32, [N])}, {"y": (F32, [N])})


def _feeds(cond):
    return {"c": np.array(cond), "x": np.random.default_rng(1).standard_normal(N).astype(np.float32)}


def test_branch_constants_move_to_the_top_block_with_distinct_names():
    data = _if_model()
    _, program = optimized(data, P)
    top = program.main.body
    (if_op,) = top.operations
    assert all(not b.constants for b in if_op.blocks)
    assert len([v for v in top.constants.values() if v.const_value.shape == (N,)]) == 3
    assert len(set(top.constants)) == len(top.constants)
    for cond in (True, False):
        want = onnxruntime_run(data, _feeds(cond))["y"]
        np.testing.assert_array_equal(offload.evaluate(program, _feeds(cond))["y"], want)


def test_a_constant_that_a_branch_returns_stays_in_the_branch():
    data = _if_model(same_names=False, returned=True)
    _, program = optimized(data, P)
    (if_op,) = program.main.body.operations
    then, other = if_op.attributes["then_branch"], if_op.attributes["else_branch"]
    assert not then.constants and list(other.constants) == ["v"]
    for cond in (True, False):
        want = onnxruntime_run(data, _feeds(cond))["y"]
        np.testing.assert_array_equal(offload.evaluate(program, _feeds(cond))["y"], want)


@needs_opencl
def test_an_if_with_a_large_branch_weight_runs_on_opencl(tmp_path):
    data = _if_model()
    program = offload.load(data)
    kept = offload.to_backend(program, "opencl", passes="none")
    assert [op.op_type for op in kept.main.body.operations] == ["If"]  # refused as written
    lowered = offload.to_backend(program, "opencl", passes=P)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"), strict=True)
    for cond in (True, False):
        want = onnxruntime_run(data, _feeds(cond))["y"]
        np.testing.assert_allclose(module.run(_feeds(cond))["y"], want, rtol=1e-6, atol=1e-6)
