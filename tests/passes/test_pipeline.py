"""The pass registry, the pipeline and offload.optimize."""

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload.errors import OffloadError, VerificationError
from offload.ir import dump
from offload.passes import DEFAULT, PASSES, graph_pass, known_passes, resolve, run_passes
from offload.passes.registry import UnknownPassError

from .helpers import F32, check, model, node, op_types, rand


def _relu_chain():
    return model(
        [node("Identity", ["x"], ["i"]), node("Relu", ["i"], ["r"]), node("Relu", ["r"], ["y"])],
        {"x": (F32, [2, 3])},
        {"y": (F32, [2, 3])},
    )


def test_every_pass_is_named_group_colon_name_and_documented():
    names = known_passes()
    assert "cleanup::dead_code_elimination" in names
    for name in names:
        group, _, short = name.partition("::")
        fn = PASSES[name]
        assert fn.__module__.endswith(f"passes.{group}.{short}"), name
        doc = fn.__doc__ or __import__(fn.__module__, fromlist=["_"]).__doc__
        assert doc and "Before" in doc and "After" in doc, name
    assert set(DEFAULT) <= set(names)


def test_unknown_pass_is_a_clear_error_listing_the_known_ones():
    program = offload.load(_relu_chain())
    with pytest.raises(
        UnknownPassError, match=r"unknown pass 'cleanup::nope'.*cleanup::dead_code_elimination"
    ):
        offload.optimize(program, ["cleanup::nope"])
    with pytest.raises(OffloadError):
        resolve("nope")
    with pytest.raises(OffloadError, match="'default', 'none'"):
        offload.optimize(program, "fast")


def test_optimize_returns_a_new_program_and_leaves_the_input_alone():
    program = offload.load(_relu_chain())
    before = dump(program)
    out = offload.optimize(program)
    assert dump(program) == before
    assert op_types(out) == {"Relu": 1}
    assert dump(offload.optimize(program, "none")) == before
    x = rand(2, 3)
    np.testing.assert_array_equal(offload.evaluate(out, {"x": x})["y"], np.maximum(x, 0))


def test_run_passes_records_counts_and_reaches_a_fixed_point():
    program = offload.load(_relu_chain())
    names = ["optimize_repeat_ops::merge_consecutive_relus", "cleanup::noop_elimination"]
    records = run_passes(program, names, fixed_point=True, verify_each=True)
    first = records[0]
    assert first.name == names[0] and first.changed and first.round == 1
    assert first.before["Relu"] == 2 and first.after["Relu"] == 1
    assert records[1].delta() == {"Identity": -1}
    assert not any(r.changed for r in records if r.round == 2) and records[-1].round == 2
    assert all(r.seconds >= 0 for r in records)


def test_verify_each_names_the_pass_that_broke_the_program():
    @graph_pass("cleanup::test_breaker")
    def breaker(program):
        program.main.body.operations.reverse()
        return True

    try:
        program = offload.load(_relu_chain())
        with pytest.raises(VerificationError, match="after pass cleanup::test_breaker"):
            run_passes(program, ["cleanup::test_breaker"], verify_each=True)
    finally:
        del PASSES["cleanup::test_breaker"]


def test_default_pipeline_matches_onnxruntime_on_a_small_cnn():
    w = rand(4, 3, 3, 3)
    scale, bias, mean = rand(4, seed=1), rand(4, seed=2), rand(4, seed=3)
    var = np.abs(rand(4, seed=4)) + 0.5
    data = model(
        [
            node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
            node("Relu", ["bn"], ["r"]),
            node("Shape", ["r"], ["shape"]),
            node("Gather", ["shape", "zero"], ["n"], axis=0),
            node("Unsqueeze", ["n", "zero1"], ["n1"]),
            node("Concat", ["n1", "minus1"], ["target"], axis=0),
            node("Reshape", ["r", "target"], ["y"]),
        ],
        {"x": (F32, [1, 3, 5, 5])},
        {"y": (F32, None)},
        {
            "w": w,
            "s": scale,
            "b": bias,
            "m": mean,
            "v": var,
            "zero": np.array(0, np.int64),
            "zero1": np.array([0], np.int64),
            "minus1": np.array([-1], np.int64),
        },
    )
    out = check(data, "default", {"x": rand(1, 3, 5, 5, seed=9)}, rtol=1e-4, atol=1e-5)
    assert op_types(out) == {"Conv": 1, "Relu": 1, "Reshape": 1}


def test_to_backend_runs_the_default_pipeline_first_unless_told_not_to():
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper as NH

    from offload.partitioner import Partitioner
    from tests.partitioner.helpers import FakeBackend

    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)), "s": rng.random(4) + 0.5, "b": rng.standard_normal(4)}
    inits |= {"m": rng.standard_normal(4), "v": rng.random(4) + 0.5}
    graph = H.make_graph(
        [
            H.make_node("Conv", ["x", "w"], ["c"]),
            H.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
            H.make_node("Relu", ["n"], ["y"]),
        ],
        "g",
        [H.make_tensor_value_info("x", TP.FLOAT, [1, 3, 6, 6])],
        [H.make_tensor_value_info("y", TP.FLOAT, None)],
        [NH.from_array(a.astype(np.float32), k) for k, a in inits.items()],
    )
    data = H.make_model(graph, opset_imports=[H.make_opsetid("", 21)], ir_version=10).SerializeToString()
    program = offload.load(data)
    x = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, x)[0]
    for passes, fallback_ops in [
        ("default", ["Conv", "Relu"]),
        ("none", ["Conv", "BatchNormalization", "Relu"]),
    ]:
        backend = FakeBackend("fake", {"Conv", "BatchNormalization", "Relu"})
        lowered = offload.to_backend(program, Partitioner([backend]), passes=passes)
        (delegate,) = lowered.main.body.operations
        assert [op.op_type for op in delegate.attributes["fallback"].operations] == fallback_ops
        np.testing.assert_allclose(offload.evaluate(lowered, x)["y"], want, rtol=1e-5, atol=1e-5)
