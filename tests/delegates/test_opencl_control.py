"""If and Loop on the `opencl` backend (PoCL): branches and bodies as device plans, against onnxruntime.

Each model is lowered whole to opencl (one Delegate, nothing on the CPU) and run for inputs that
take each branch, several trip counts and several shapes; onnxruntime on the same ONNX model is
the reference.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload import runtime
from offload.delegates import registry
from offload.delegates.gpu import control
from offload.errors import ModelFormatError

from .opencl_support import RT, model, needs_opencl, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(11)
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _graph(name, nodes, inputs, outputs, initializers=()):
    """A branch or body: inputs/outputs as (name, elem type, shape)."""
    return helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        list(initializers),
    )


def _module(program, tmp_path):
    lowered = offload.to_backend(program, "opencl", passes="none")
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    assert all(d[:2] == ("opencl", "backend") for d in module.method("forward").delegates)
    return module


def _items(module) -> list:
    """The item types of every specialization the module's delegate built."""
    (delegate,) = module.method("forward")._delegates.values()
    return [type(x).__name__ for s in delegate.handle.specializations.entries.values() for x in s.launches]


def check_all(program, tmp_path, feeds_list, rtol=1e-5, atol=1e-5):
    """Whole on opencl, each feeds in turn against onnxruntime; no call may fall back to the CPU."""
    module = _module(program, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a SpecializationError fallback warns
        for feeds in feeds_list:
            got, want = module.run(feeds), reference(program, feeds)
            for k, v in want.items():
                assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].shape, v.shape)
                np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol)
    return module


def _if_on_data():
    """z = y * k where (y, k) = If(sum(x) > 0, then: (relu(x) * w, its constant 2), else: (x - 1, 1));
    w and 1 are read from the outer graph."""
    then = _graph(
        "then",
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "w"], ["t"])],
        [],
        [("t", F, ["N", 4]), ("k", F, [1])],
        [helper.make_tensor("k", F, [1], [2.0])],
    )
    other = _graph(
        "else",
        [helper.make_node("Sub", ["x", "one"], ["e"]), helper.make_node("Identity", ["one"], ["one_"])],
        [],
        [("e", F, ["N", 4]), ("one_", F, [1])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y", "k_or_one"], then_branch=then, else_branch=other),
        helper.make_node("Mul", ["y", "k_or_one"], ["z"]),
    ]
    inits = [("w", _x(4)), ("zero", np.float32(0)), ("one", np.ones(1, np.float32))]
    return model(nodes, [("x", ["N", 4])], ["z"], inits)


def test_if_on_a_data_dependent_condition_runs_either_branch_on_the_device(tmp_path):
    x = np.abs(_x(3, 4))
    module = check_all(_if_on_data(), tmp_path, [{"x": x}, {"x": -x}, {"x": _x(5, 4) + 3}, {"x": -x}])
    kinds = _items(module)
    assert "Branch" in kinds and "Jump" in kinds  # the condition was read on the device


def test_if_decided_by_shapes_records_only_its_branch(tmp_path):
    """The condition folds from the input's shape: each specialization holds one branch, inline."""
    then = _graph("then", [helper.make_node("Neg", ["x"], ["t"])], [], [("t", F, ["N", 3])])
    other = _graph("else", [helper.make_node("Exp", ["x"], ["e"])], [], [("e", F, ["N", 3])])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], end=1),
        helper.make_node("Greater", ["shape", "two"], ["c1"]),
        helper.make_node("Squeeze", ["c1"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    program = model(nodes, [("x", ["N", 3])], ["y"], [("two", np.array([2], np.int64))])
    module = check_all(program, tmp_path, [{"x": _x(1, 3)}, {"x": _x(4, 3)}, {"x": _x(2, 3)}])
    assert not set(_items(module)) & {"Branch", "Jump", "Copy"}


def test_if_branches_of_different_shapes_fall_back_to_the_cpu_for_that_call(tmp_path):
    then = _graph("then", [helper.make_node("Neg", ["x"], ["t"])], [], [("t", F, ["N"])])
    other = _graph("else", [helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], [], [("e", F, ["M"])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    program = model(nodes, [("x", ["N"])], ["y"], [("zero", np.float32(0))])
    module = _module(program, tmp_path)
    x = np.abs(_x(3))
    with pytest.warns(RuntimeWarning, match="else-branch is \\[6\\] where it was \\[3\\]"):
        got = module.run({"x": x})  # said once per delegate and reason
    np.testing.assert_allclose(got["y"], reference(program, {"x": x})["y"], rtol=1e-6)
    np.testing.assert_allclose(module.run({"x": -x})["y"], reference(program, {"x": -x})["y"], rtol=1e-6)


def _counting_loop(with_cond_input: bool):
    """for i in range(M): acc = acc * 0.5 + x * i; rows[i] = acc (scan output)."""
    body = _graph(
        "body",
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Mul", ["acc", "half"], ["a2"]),
            helper.make_node("Add", ["a2", "xi"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["row"]),
        ],
        [("i", I64, []), ("cond_in", B, []), ("acc", F, ["N", 2])],
        [("cond_out", B, []), ("acc_out", F, ["N", 2]), ("row", F, ["N", 2])],
    )
    cond = "true" if with_cond_input else ""
    nodes = [helper.make_node("Loop", ["M", cond, "x"], ["final", "rows"], body=body)]
    inits = [("half", np.float32(0.5))] + ([("true", np.array(True))] if with_cond_input else [])
    return model(nodes, [("x", ["N", 2]), ("M", [], np.int64)], ["final", "rows"], inits)


@pytest.mark.parametrize("with_cond_input", [False, True])
def test_loop_with_iteration_number_and_scan_output(tmp_path, with_cond_input):
    program = _counting_loop(with_cond_input)
    feeds = [{"x": _x(3, 2), "M": np.array(m, np.int64)} for m in (4, 1, 2)]
    feeds += [{"x": _x(5, 2), "M": np.array(3, np.int64)}, feeds[0]]
    module = check_all(program, tmp_path, feeds)
    assert "LoopHead" in _items(module)


def test_while_loop_reads_its_condition_each_iteration(tmp_path):
    """while sum(h) < 100 and i < M: h = h * 2 + 1 (the condition computed in the body)."""
    body = _graph(
        "body",
        [
            helper.make_node("Mul", ["h", "two"], ["h2"]),
            helper.make_node("Add", ["h2", "one"], ["h_out"]),
            helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["cond_out"]),
        ],
        [("i", I64, []), ("cond_in", B, []), ("h", F, ["N"])],
        [("cond_out", B, []), ("h_out", F, ["N"])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s0"], keepdims=0),
        helper.make_node("Less", ["s0", "limit"], ["c0"]),
        helper.make_node("Loop", ["M", "c0", "x"], ["h_final"], body=body),
    ]
    inits = [
        ("M", np.array(1000, np.int64)),
        ("two", np.float32(2)),
        ("one", np.float32(1)),
        ("limit", np.float32(100)),
    ]
    program = model(nodes, [("x", ["N"])], ["h_final"], inits)
    x = np.abs(_x(4))
    check_all(program, tmp_path, [{"x": x}, {"x": x + 200}, {"x": np.abs(_x(7))}])


def test_loop_swapping_carried_values(tmp_path):
    """(a, b) = (b, a + b) M times: a result that is another parameter goes through a staging copy."""
    body = _graph(
        "body",
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["a", "b"], ["s"])],
        [("i", I64, []), ("c", B, []), ("a", F, [3]), ("b", F, [3])],
        [("c_out", B, []), ("b", F, [3]), ("s", F, [3])],
    )
    nodes = [helper.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b"], body=body)]
    program = model(nodes, [("a0", [3]), ("b0", [3])], ["a", "b"], [("M", np.array(6, np.int64))])
    check_all(program, tmp_path, [{"a0": _x(3), "b0": _x(3)}])


def test_loop_inside_if_and_loop_inside_loop(tmp_path):
    inner = _graph(
        "inner",
        [helper.make_node("Identity", ["ic"], ["ic_out"]), helper.make_node("Add", ["v", "x"], ["v_out"])],
        [("j", I64, []), ("ic", B, []), ("v", F, ["N"])],
        [("ic_out", B, []), ("v_out", F, ["N"])],
    )
    outer = _graph(
        "outer",
        [
            helper.make_node("Identity", ["oc"], ["oc_out"]),
            helper.make_node("Loop", ["three", "", "u"], ["u2"], body=inner),
            helper.make_node("Mul", ["u2", "half"], ["u_out"]),
        ],
        [("k", I64, []), ("oc", B, []), ("u", F, ["N"])],
        [("oc_out", B, []), ("u_out", F, ["N"])],
    )
    then = _graph(
        "then",
        [helper.make_node("Loop", ["M", "", "x"], ["t"], body=outer)],
        [],
        [("t", F, ["N"])],
    )
    other = _graph("else", [helper.make_node("Neg", ["x"], ["e"])], [], [("e", F, ["N"])])
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Greater", ["m", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = [("three", np.array(3, np.int64)), ("half", np.float32(0.5)), ("zero", np.float32(0))]
    program = model(nodes, [("x", ["N"]), ("M", [], np.int64)], ["y"], inits)
    x = np.abs(_x(5))
    feeds = [{"x": x, "M": np.array(m, np.int64)} for m in (2, 5)] + [{"x": -x, "M": np.array(2, np.int64)}]
    check_all(program, tmp_path, feeds)


def _refusal(program) -> str:
    report = offload.partitioner.Partitioner("opencl").partition(program)
    (loop,) = [p for p in report.placements if p.op.op_type == "Loop"]
    assert not loop.delegated
    return loop.detail


def test_a_body_reading_its_iteration_number_as_a_shape_stays_on_the_cpu():
    body = _graph(
        "body",
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Unsqueeze", ["i", "axes"], ["end"]),
            helper.make_node("Slice", ["x", "zeros", "end"], ["row"]),
            helper.make_node("ReduceSum", ["row"], ["s"], keepdims=1),
            helper.make_node("Add", ["acc", "s"], ["acc_out"]),
        ],
        [("i", I64, []), ("c", B, []), ("acc", F, [1])],
        [("c_out", B, []), ("acc_out", F, [1])],
    )
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)]
    inits = [
        ("M", np.array(3, np.int64)),
        ("axes", np.array([0], np.int64)),
        ("zeros", np.array([0], np.int64)),
    ]
    program = model(nodes, [("x", [8]), ("acc0", [1])], ["acc"], inits)
    assert "as a shape" in _refusal(program)


def test_scan_outputs_of_a_data_dependent_loop_stay_on_the_cpu():
    body = _graph(
        "body",
        [
            helper.make_node("Add", ["h", "one"], ["h_out"]),
            helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["c_out"]),
            helper.make_node("Identity", ["h_out"], ["row"]),
        ],
        [("i", I64, []), ("c", B, []), ("h", F, [2])],
        [("c_out", B, []), ("h_out", F, [2]), ("row", F, [2])],
    )
    nodes = [helper.make_node("Loop", ["M", "go", "x"], ["h", "rows"], body=body)]
    inits = [
        ("M", np.array(9, np.int64)),
        ("go", np.array(True)),
        ("one", np.float32(1)),
        ("limit", np.float32(8)),
    ]
    program = model(nodes, [("x", [2])], ["h", "rows"], inits)
    assert "scan outputs" in _refusal(program)
    assert offload.evaluate(program, {"x": np.zeros(2, np.float32)})["rows"].shape == (4, 2)


def test_a_malformed_sub_plan_is_a_model_format_error():
    program = _counting_loop(False)
    lowered = offload.to_backend(program, "opencl", passes="none")
    (delegate,) = lowered.main.body.operations
    plan = json.loads(delegate.attributes["processed"])
    weights = {n: v.const_value for n, v in delegate.attributes["fallback"].constants.items()}
    (loop,) = [s for s in plan["ops"] if s["type"] == "Loop"]
    loop["body"]["outputs"] = loop["body"]["outputs"][:1]
    with pytest.raises(ModelFormatError, match="body does not match"):
        RT.init(json.dumps(plan).encode(), [], weights)
    del loop["body"]
    with pytest.raises(ModelFormatError, match="malformed sub-plan"):
        RT.init(json.dumps(plan).encode(), [], weights)


def test_the_run_loop_follows_branches_and_counts_iterations():
    """``control.run`` alone, on a hand-made item list: an if/else then a two-trip loop."""
    from offload.delegates.gpu.api import Buf

    trace = []
    items = [
        control.Branch([Buf(0)], target=3),
        "then",
        control.Jump(target=4),
        "else",
        control.LoopHead(trips=2, cond=None, iteration=7, exit=7),
        "body",
        control.LoopBack(head=4),
        "after",
    ]
    for flag in (True, False):
        trace.clear()
        control.run(
            items,
            trace.append,
            lambda *a: trace.append(("copy", a)),
            lambda v, flag=flag: flag,
            lambda v, value: trace.append(("iteration", int(value))),
        )
        branch = "then" if flag else "else"
        assert trace == [branch, ("iteration", 0), "body", ("iteration", 1), "body", "after"]


def test_the_opencl_backend_lists_if_and_loop():
    caps = registry.get("opencl").compiler().capabilities
    assert {"If", "Loop"} <= set(caps)
    assert RT.is_available()
