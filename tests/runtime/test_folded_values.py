"""Folded values (runtime/folded_values.py): a shape specialization holds the values known from
its key (Shape → Gather → Concat targets, an If's condition on the batch) as constants and drops
their steps; runs at changing shapes, through both branches, with a profile, match onnxruntime.
And a step with a planned result whose input a run decides is prepared in the specialization."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
from offload.profile import Profile
from offload.runtime.folded_values import _Folded
from offload.runtime.shape_specializations import _ShapeSpecialization
from offload.runtime.steps import _BoundRun, _PreparedStep

from .onnx_graphs import model_bytes

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model() -> bytes:
    """y = Reshape(Relu(x), [batch, -1]) * 2 where batch is 1, else * 3: the target and the
    condition come from Shape(x) (an exported model's reshape and its batch-1 branch)."""

    def branch(name, factor):
        return helper.make_graph(
            [helper.make_node("Mul", ["flat", factor], [f"{name}_y"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", F32, None)],
        )

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["flat"]),
        helper.make_node("Equal", ["n", "one"], ["single"]),
        helper.make_node(
            "If", ["single"], ["y"], then_branch=branch("a", "two"), else_branch=branch("b", "three")
        ),
    ]
    inits = [
        ("zero", np.array([0], np.int64)),
        ("one", np.array([1], np.int64)),
        ("minus_one", np.array([-1], np.int64)),
        ("two", np.array(2.0, np.float32)),
        ("three", np.array(3.0, np.float32)),
    ]
    return model_bytes(nodes, [("x", F32, ["batch", 3, 4])], [("y", F32, None)], inits)


def _specialization(method, shape) -> _ShapeSpecialization:
    entry = method._specializations.entries.get((shape,))
    assert isinstance(entry, _ShapeSpecialization), entry
    return entry


def test_known_values_are_folded_and_runs_match_onnxruntime():
    data = _model()
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    kept = []
    for batch in [1, 1, 1, 3, 3, 3, 1, 2, 2]:
        x = rng.standard_normal((batch, 3, 4)).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
        kept.append((got, session.run(None, {"x": x})[0]))
    for got, want in kept:  # a later run wrote none of the earlier results
        np.testing.assert_array_equal(got, want)
    for batch in (1, 3, 2):
        plan = _specialization(method, (batch, 3, 4))
        folded = sorted(s.info().name for s in plan.steps if isinstance(s, _Folded))
        assert folded == ["onnx::Concat", "onnx::Equal", "onnx::Gather", "onnx::Shape"]
        # the values the frames start with: Shape's, the target, the condition
        values = {tuple(np.asarray(v).reshape(-1).tolist()) for v in plan.folded.values()}
        assert (batch, 3, 4) in values and (batch, -1) in values and (batch == 1,) in values
        # the Reshape reads the folded target: it is bound with Relu's prepared call
        bound = [s.kernel.op_name for r in plan.fast_steps if isinstance(r, _BoundRun) for s in r.steps]
        assert "onnx::Reshape" in bound and "onnx::Relu" in bound


def test_a_profiled_run_of_a_specialization_with_folded_steps():
    data = _model()
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal((3, 3, 4)).astype(np.float32)
    method.run({"x": x})
    method.run({"x": x})
    profile = Profile()
    got = method.run({"x": x}, profile=profile)["y"]
    np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
    assert any(e.name == "folded" for e in profile.events)
    steps = _specialization(method, (3, 3, 4)).steps
    assert not any(isinstance(s, _PreparedStep) and s.kernel.op_name == "onnx::Shape" for s in steps)


def test_a_planned_result_of_a_symbolic_input_is_prepared_in_the_specialization():
    """ReduceMax over every axis of a [batch, 8] value has a static result (a scalar with its
    arena place at load) but an input whose type a run decides: the shape specialization makes
    its prepared call, bound with the Sub after it (the mel front end's log-spectrum ceiling)."""
    data = model_bytes(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("ReduceMax", ["r"], ["m"], keepdims=0),
            helper.make_node("Sub", ["m", "one"], ["y"]),
        ],
        [("x", F32, ["batch", 8])],
        [("y", F32, [])],
        [("one", np.array(1.0, np.float32))],
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert method._planned[method._steps[1].out_slots[0]] is not None
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    for batch in [3, 3, 3, 5, 5]:
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
        np.testing.assert_array_equal(got, np.maximum(x, 0).max() - np.float32(1))
    bound = [
        s.kernel.op_name
        for r in _specialization(method, (3, 8)).fast_steps
        if isinstance(r, _BoundRun)
        for s in r.steps
    ]
    assert "onnx::ReduceMax" in bound and "onnx::Sub" in bound
