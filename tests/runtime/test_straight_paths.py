"""Straight paths (runtime/straight_paths.py): a shape specialization whose key decides every
jump takes them ahead of time, skips the steps no run reaches and binds the If's moves with the
prepared steps around them; runs through each branch match onnxruntime, and offload.evaluate bit
for bit. A jump whose condition the key does not decide leaves the steps as they are."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
from offload.profile import Profile
from offload.runtime.shape_specializations import _ShapeSpecialization
from offload.runtime.steps import _BoundRun, _JumpStep, _MoveStep
from offload.runtime.straight_paths import _Goto, _Skipped

from .onnx_graphs import model_bytes

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _if(cond: str, out: str, then_node, else_node):
    """If(cond) with one node a branch, each branch's result its node's first output."""

    def branch(name, node):
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], F32, None)])

    return helper.make_node(
        "If",
        [cond],
        [out],
        then_branch=branch(f"{out}_then", then_node),
        else_branch=branch(f"{out}_else", else_node),
    )


def _vad_like() -> bytes:
    """An exported voice-activity net's control flow: an If on the sample rate (an input that
    only picks a branch: * 2 or * 3), then an If on batch 1 (Squeeze the batch away, else
    Identity) whose result the steps after the join read (Abs, ReduceMean over the last axis)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
        _if(
            "is16k",
            "scaled",
            helper.make_node("Mul", ["r", "two"], ["a"]),
            helper.make_node("Mul", ["r", "three"], ["b"]),
        ),
        helper.make_node("Shape", ["scaled"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "one"], ["single"]),
        _if(
            "single",
            "joined",
            helper.make_node("Squeeze", ["scaled", "zero"], ["c"]),
            helper.make_node("Identity", ["scaled"], ["d"]),
        ),
        helper.make_node("Abs", ["joined"], ["g"]),
        helper.make_node("ReduceMean", ["g", "last"], ["y"], keepdims=0),
    ]
    inits = [
        ("rate", np.array(16000, np.int64)),
        ("two", np.array(2.0, np.float32)),
        ("three", np.array(3.0, np.float32)),
        ("zero", np.array([0], np.int64)),
        ("one", np.array([1], np.int64)),
        ("last", np.array([-1], np.int64)),
    ]
    return model_bytes(nodes, [("x", F32, ["batch", 8]), ("sr", I64, [])], [("y", F32, None)], inits)


def _plan(method, key) -> _ShapeSpecialization:
    entry = method._specializations.entries.get(key)
    assert isinstance(entry, _ShapeSpecialization), entry
    return entry


def test_decided_jumps_are_taken_ahead_and_runs_match_onnxruntime_and_evaluate():
    data = _vad_like()
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    assert method._deciding == (1,)
    assert sum(isinstance(s, _JumpStep) for s in method._steps) >= 4  # two Ifs: two jumps each
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    kept = []
    for batch, sr in [(1, 16000)] * 3 + [(3, 8000)] * 3 + [(1, 8000)] * 3 + [(3, 16000)] * 3 + [(1, 16000)]:
        feeds = {"x": rng.standard_normal((batch, 8)).astype(np.float32), "sr": np.array(sr, np.int64)}
        got = method.run(feeds)["y"]
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])
        kept.append((got, want))
    for got, want in kept:  # a later run wrote over none of the earlier results
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for batch, sr in [(1, 16000), (3, 8000), (1, 8000), (3, 16000)]:
        plan = _plan(method, ((batch, 8), ((), np.array(sr, np.int64).tobytes())))
        assert not any(isinstance(s, _JumpStep) for s in plan.steps)
        assert any(isinstance(s, _Goto) for s in plan.steps)
        skipped = [s.info().name for s in plan.steps if isinstance(s, _Skipped)]
        assert ("onnx::Mul" in skipped) and ("onnx::Squeeze" in skipped or "onnx::Identity" in skipped)
        bound = [s.kernel.op_name for r in plan.fast_steps if isinstance(r, _BoundRun) for s in r.steps]
        # the taken branches, the moves of both If results and the steps after the joins: one run
        assert bound.count("move") == 2, bound
        assert {"onnx::Relu", "onnx::Mul", "onnx::Abs", "onnx::ReduceMean"} <= set(bound)
        assert not any(isinstance(s, (_MoveStep, _JumpStep)) for s in plan.fast_steps)
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32), "sr": np.array(8000, np.int64)}
    profile = Profile()  # the straight steps run one at a time, each an event
    got = method.run(feeds, profile=profile)["y"]
    np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])
    assert any(e.name == "jump" for e in profile.events)


def test_a_jump_on_data_is_left_as_it_is():
    """An If on the sign of the input's sum: the key does not decide it, and no step is skipped."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        _if(
            "positive",
            "y",
            helper.make_node("Mul", ["r", "two"], ["a"]),
            helper.make_node("Identity", ["r"], ["b"]),
        ),
    ]
    inits = [("zero", np.array(0.0, np.float32)), ("two", np.array(2.0, np.float32))]
    data = model_bytes(nodes, [("x", F32, ["batch", 8])], [("y", F32, None)], inits)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    for sign in [1, 1, 1, -1, -1, 1]:
        x = (sign * np.abs(rng.standard_normal((2, 8)))).astype(np.float32)
        np.testing.assert_array_equal(method.run({"x": x})["y"], session.run(None, {"x": x})[0])
    entry = method._specializations.entries.get(((2, 8),))
    steps = entry.steps if isinstance(entry, _ShapeSpecialization) else method._steps
    assert any(isinstance(s, _JumpStep) for s in steps)
    assert not any(isinstance(s, (_Goto, _Skipped)) for s in steps)
