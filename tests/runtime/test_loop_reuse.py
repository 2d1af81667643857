"""Products in a loop's body that reuse the last trip's result while their operands hold the same
bits (runtime/loop_reuse.py): a decoder that carries its encoder's features through the Loop
(Unsqueeze then Squeeze at every trip) and projects them at each trip. Checked against
onnxruntime and, bit for bit, against offload.evaluate (the kernels at every trip); the product
runs once a run where the features pass through unchanged, at every trip where they change."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.loop_reuse import _ReusedLoopStep
from offload.runtime.loop_steps import _LoopStep

from .onnx_graphs import model_bytes

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _decoder(changing: bool) -> bytes:
    """Carried features f (64, 64), projected by MatMul at each trip and added to the state's
    projection; the state h (1, 32) is the column means of their tanh. ``changing``: the body adds
    0.5 to f at each trip instead of passing it through."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32) * 0.1, "wf"),
        numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32) * 0.1, "wh"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1 / 64, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("MatMul", ["f", "wf"], ["pf"]),
        helper.make_node("MatMul", ["h", "wh"], ["ph"]),
        helper.make_node("Add", ["pf", "ph"], ["e"]),
        helper.make_node("Tanh", ["e"], ["t"]),
        helper.make_node("ReduceSum", ["t", "ax0"], ["ts"], keepdims=1),
        helper.make_node("Mul", ["ts", "scale"], ["h2"]),
        helper.make_node("Unsqueeze", ["f", "ax0"], ["fu"]),
        helper.make_node("Squeeze", ["fu", "ax0"], ["fs"]),
        helper.make_node("Add" if changing else "Identity", ["fs", "half"] if changing else ["fs"], ["f2"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    body = helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", BOOL, []),
            helper.make_tensor_value_info("h", F32, None),
            helper.make_tensor_value_info("f", F32, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("h2", F32, None),
            helper.make_tensor_value_info("f2", F32, None),
            helper.make_tensor_value_info("h2", F32, None),
        ],
        inits,
    )
    return model_bytes(
        [
            helper.make_node("Relu", ["x"], ["f0"]),
            helper.make_node("Loop", ["M", "", "h0", "f0"], ["h_end", "f_end", "hs"], body=body),
        ],
        [("x", F32, [64, 64]), ("M", I64, []), ("h0", F32, [1, 32])],
        [("h_end", F32, None), ("f_end", F32, None), ("hs", F32, None)],
    )


@pytest.mark.parametrize("changing", [False, True])
def test_carried_features_are_projected_once_a_run(changing, monkeypatch):
    data = _decoder(changing)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    rng = np.random.default_rng(4)
    trips = 7
    calls: list = []
    run = _LoopStep.run
    monkeypatch.setattr(_LoopStep, "run", lambda self, frame: (calls.append(self), run(self, frame))[1])
    for k in range(4):  # the noting run (kernels), then the specialization's, on new features each time
        feeds = {
            "x": rng.standard_normal((64, 64)).astype(np.float32),
            "M": np.array(trips, np.int64),
            "h0": np.zeros((1, 32), np.float32),
        }
        calls.clear()
        got, want = method.run(feeds), dict(zip(["h_end", "f_end", "hs"], session.run(None, feeds)))
        ref = offload.evaluate(program, feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
        if k == 0:
            continue
        (spec,) = [e for e in method._specializations.entries.values() if hasattr(e, "steps")]
        # the features' projection only: the state's [1, 32] by [32, 32] is not worth the checks
        [reused] = [s for s in spec.steps if isinstance(s, _ReusedLoopStep)]
        assert reused.step.checks[0][2] == (64, 64)
        projections = sum(c is reused.step for c in calls)
        assert projections == (trips if changing else 1)
