"""Bound calls that read their operands in place: a Gather of constant indices (one index, or a
run of consecutive ones) copies from a view of what it takes, ReduceSum and ReduceMean of constant
axes reduce straight into the output's place; against onnxruntime, and offload.evaluate bit for
bit, and the bound calls are those."""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.reduction_prepared import _mean_into

from .onnx_graphs import model_bytes

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model() -> bytes:
    nodes = [
        helper.make_node("Gather", ["state", "zero"], ["h"], axis=0),  # an exported LSTM's state[0]
        helper.make_node("Gather", ["state", "last"], ["c"], axis=0),  # -1: counted from the end
        helper.make_node("Gather", ["x", "run"], ["cols"], axis=2),  # consecutive: a slice
        helper.make_node("Gather", ["x", "swapped"], ["picked"], axis=1),  # np.take's
        helper.make_node("Gather", ["v", "last"], ["v_last"], axis=0),  # one element of a vector: 0-d
        helper.make_node("ReduceMean", ["x", "minus_one"], ["mean"], keepdims=0),
        helper.make_node("ReduceMean", ["x", "outer"], ["mean_kept"], keepdims=1),
        helper.make_node("ReduceSum", ["x", "middle"], ["total"], keepdims=0),
        helper.make_node("ReduceMean", ["one", "minus_one"], ["single"], keepdims=0),  # of one element
    ]
    inits = [
        ("zero", np.array(0, np.int64)),
        ("last", np.array(-1, np.int64)),
        ("run", np.array([1, 2], np.int64)),
        ("swapped", np.array([2, 0], np.int64)),
        ("minus_one", np.array([-1], np.int64)),
        ("outer", np.array([0, 2], np.int64)),
        ("middle", np.array([1], np.int64)),
    ]
    return model_bytes(
        nodes,
        [("state", F32, [2, 1, 8]), ("x", F32, [3, 5, 4]), ("one", F32, [1, 1]), ("v", F32, [3])],
        [
            ("h", F32, [1, 8]),
            ("c", F32, [1, 8]),
            ("cols", F32, [3, 5, 2]),
            ("picked", F32, [3, 2, 4]),
            ("v_last", F32, []),
            ("mean", F32, [3, 5]),
            ("mean_kept", F32, [1, 5, 1]),
            ("total", F32, [3, 4]),
            ("single", F32, [1]),
        ],
        inits,
    )


def test_gathers_and_reductions_bound_in_place_match_onnxruntime_and_evaluate():
    data = _model()
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    for _ in range(3):
        feeds = {
            "state": rng.standard_normal((2, 1, 8)).astype(np.float32),
            "x": (rng.standard_normal((3, 5, 4)) * 10).astype(np.float32),
            "one": rng.standard_normal((1, 1)).astype(np.float32),
            "v": rng.standard_normal(3).astype(np.float32),
        }
        got = method.run(feeds)
        want = dict(zip(method.output_names, session.run(None, feeds)))
        by_evaluate = offload.evaluate(program, feeds)
        for name in method.output_names:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)
            np.testing.assert_array_equal(got[name], by_evaluate[name])
        for name in ("h", "c", "cols", "picked", "v_last"):
            np.testing.assert_array_equal(got[name], want[name])
    bound = [c for run in method._pool[0][2] for c in run]
    funcs = [getattr(c, "func", c) for c in bound]
    assert funcs.count(np.copyto) == 4  # state[0], state[-1], the run of columns and v[-1]
    assert funcs.count(np.take) == 1  # indices out of order
    assert funcs.count(_mean_into) == 3 and funcs.count(np.add.reduce) == 1
    assert all(isinstance(c, functools.partial) for c in bound)


def _lstm_weights(rng, hidden: int) -> list:
    """W, R and B of a forward LSTM of 8 inputs and ``hidden`` units, small enough not to saturate."""
    return [
        (name, (rng.standard_normal(shape) * 0.3).astype(np.float32))
        for name, shape in (("W", (1, 4 * hidden, 8)), ("R", (1, 4 * hidden, hidden)), ("B", (1, 8 * hidden)))
    ]


def test_an_lstm_without_sequence_lengths_is_bound_with_the_steps_around_it():
    """An exported voice-activity net's decoder: the state's two halves gathered and unsqueezed
    into the LSTM's initial states, its final states squeezed back. The LSTM's prepared call joins
    the bound run, so the Squeezes that read its results do too; onnxruntime's results, and
    evaluate's bit for bit, at every step of a stream whose state goes around."""
    H = 16
    rng = np.random.default_rng(10)
    nodes = [
        helper.make_node("Gather", ["state", "zero"], ["h"], axis=0),
        helper.make_node("Gather", ["state", "one"], ["c"], axis=0),
        helper.make_node("Unsqueeze", ["h", "axis0"], ["h0"]),
        helper.make_node("Unsqueeze", ["c", "axis0"], ["c0"]),
        helper.make_node("Unsqueeze", ["x", "axis0"], ["xs"]),
        helper.make_node("LSTM", ["xs", "W", "R", "B", "", "h0", "c0"], ["Y", "Yh", "Yc"], hidden_size=H),
        helper.make_node("Squeeze", ["Yh", "axis0"], ["h1"]),
        helper.make_node("Squeeze", ["Yc", "axis0"], ["c1"]),
        helper.make_node("Unsqueeze", ["h1", "axis0"], ["h2"]),
        helper.make_node("Unsqueeze", ["c1", "axis0"], ["c2"]),
        helper.make_node("Concat", ["h2", "c2"], ["new_state"], axis=0),
        helper.make_node("Relu", ["h1"], ["y"]),
    ]
    inits = [
        ("zero", np.array(0, np.int64)),
        ("one", np.array(1, np.int64)),
        ("axis0", np.array([0], np.int64)),
        *_lstm_weights(rng, H),
    ]
    data = model_bytes(
        nodes,
        [("x", F32, [1, 8]), ("state", F32, [2, 1, H])],
        [("y", F32, [1, H]), ("new_state", F32, [2, 1, H])],
        inits,
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, H), np.float32)
    for _ in range(4):
        feeds = {"x": rng.standard_normal((1, 8)).astype(np.float32), "state": state}
        got = method.run(feeds)
        want = dict(zip(["y", "new_state"], session.run(None, feeds)))
        by_evaluate = offload.evaluate(program, feeds)
        for name in ("y", "new_state"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got[name], by_evaluate[name])
        state = got["new_state"]
    runs = [[s.kernel.op_name for s in run] for run in method._bound_runs]
    assert any("onnx::LSTM" in ops and ops.count("onnx::Squeeze") == 2 for ops in runs), runs


def test_an_lstm_whose_final_states_are_results_of_a_static_type_is_prepared_per_shape():
    """Another export of the same net: X follows from an input of a symbolic batch (known per
    shape specialization), while the final states are method results of a static type (places
    in the file's arena). The specialization prepares the LSTM and binds it with the steps
    around it; onnxruntime's results, and evaluate's bit for bit, over a stream."""
    H = 16
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axis0"], ["xs"]),
        helper.make_node("LSTM", ["xs", "W", "R", "B", "", "h", "c"], ["Y", "hn", "cn"], hidden_size=H),
        helper.make_node("Squeeze", ["hn", "axis0"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["y"]),
    ]
    inits = [
        ("axis0", np.array([0], np.int64)),
        *_lstm_weights(rng, H),
    ]
    data = model_bytes(
        nodes,
        [("x", F32, ["batch", 8]), ("h", F32, [1, 1, H]), ("c", F32, [1, 1, H])],
        [("y", F32, None), ("hn", F32, [1, 1, H]), ("cn", F32, [1, 1, H])],
        inits,
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    h = c = np.zeros((1, 1, H), np.float32)
    for _ in range(4):
        feeds = {"x": rng.standard_normal((1, 8)).astype(np.float32), "h": h, "c": c}
        got = method.run(feeds)
        want = dict(zip(["y", "hn", "cn"], session.run(None, feeds)))
        by_evaluate = offload.evaluate(program, feeds)
        for name in ("y", "hn", "cn"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(got[name], by_evaluate[name])
        h, c = got["hn"], got["cn"]
    plan = method._specializations.entries.get(((1, 8), (1, 1, H), (1, 1, H)))
    runs = [[s.kernel.op_name for s in run] for run in plan.bound_runs]
    assert any("onnx::LSTM" in ops and "onnx::Relu" in ops for ops in runs), runs
