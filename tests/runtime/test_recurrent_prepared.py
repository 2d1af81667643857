"""Prepared RNN, GRU and LSTM calls (runtime/kernels/recurrent_prepared.py ``_PreparedCall``, run by
runtime/steps.py's ``_PreparedOutputsStep``) against onnxruntime, or ONNX's reference evaluator
where onnxruntime has no kernel (layout 1, float64).

Every .pte here is checked to run its recurrent op by the prepared call: the kernel the step
would fall back to is replaced by one that fails the test (``refuse_kernel``), except where a
test asks for the fallback (bad values). Each .pte runs at least twice (the second run finds the
derived weights and buffers the first kept).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

import offload
from offload.runtime.steps import _PreparedOutputsStep
from tests.reference import assert_close, sum_tolerance

from .test_recurrent_fast import OUTPUTS, as_float64, model, run_in_threads

MODELS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models")
DIRECTIONS = ["forward", "reverse", "bidirectional"]


class _Refused:
    def __init__(self, what: str):
        self.what = what

    def run(self, frame):
        raise AssertionError(f"{self.what}: the prepared call fell back to the kernel")


def refuse_kernel(steps) -> list:
    """The _PreparedOutputsSteps of ``steps``, their kernels replaced by one that fails."""
    found = [s for s in steps if type(s) is _PreparedOutputsStep]
    for s in found:
        s.kernel = _Refused(s.kernel.what)
    return found


def load(m: onnx.ModelProto):
    return offload.runtime.load(offload.save(offload.load(m.SerializeToString()))).method("forward")


def reference(m: onnx.ModelProto, feeds: dict, how: str = "onnxruntime") -> list:
    if how == "onnxruntime":
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    return ReferenceEvaluator(m).run(None, feeds)


def run_prepared(m, feeds, names, want, runs=2, tol=1e-5):
    method = load(m)
    assert len(refuse_kernel(method._steps)) == 1
    for k in range(runs):
        got = method.run(feeds)
        for name, w in zip(names, want):
            np.testing.assert_allclose(got[name], w, rtol=tol, atol=tol, err_msg=f"run {k} {name}")
    return method


@pytest.mark.parametrize("init", [False, True])
@pytest.mark.parametrize("lens", [None, [5, 2, 0]])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_prepared_against_onnxruntime(op, direction, lens, init):
    attrs = {"linear_before_reset": 1} if op == "GRU" and direction == "bidirectional" else {}
    m, feeds = model(op, direction, T=5, N=3 if lens else 1, lens=lens, init=init, **attrs)
    run_prepared(m, feeds, OUTPUTS[op], reference(m, feeds))


@pytest.mark.parametrize("H", [8, 40])  # the block product and the stacked one
@pytest.mark.parametrize("lbr", [0, 1])
def test_prepared_gru_both_resets(lbr, H):
    m, feeds = model("GRU", "bidirectional", H=H, init=True, linear_before_reset=lbr)
    run_prepared(m, feeds, OUTPUTS["GRU"], reference(m, feeds))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_prepared_layout_1(op, direction):
    m, feeds = model(op, direction, N=2, init=True, layout=1)
    run_prepared(m, feeds, OUTPUTS[op], reference(m, feeds, "onnx"))


@pytest.mark.parametrize("read", [("Y",), ("Y_h",), ("Y_c",), ("Y_h", "Y_c")])
def test_prepared_outputs_no_one_reads(read):
    # The node keeps its three outputs; the graph returns only ``read``: the others are not written.
    m, feeds = model("LSTM", "bidirectional", N=2, init=True)
    want = dict(zip(OUTPUTS["LSTM"], reference(m, feeds)))
    kept = [o for o in m.graph.output if o.name in read]
    del m.graph.output[:]
    m.graph.output.extend(kept)
    method = run_prepared(m, feeds, read, [want[n] for n in read])
    (step,) = [s for s in method._steps if type(s) is _PreparedOutputsStep]
    assert step.wanted == [n in read for n in OUTPUTS["LSTM"]]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_prepared_float64(op):
    m, feeds = as_float64(*model(op, "bidirectional", N=2, init=True))
    method = run_prepared(m, feeds, OUTPUTS[op], reference(m, feeds, "onnx"), tol=1e-12)
    assert all(v.dtype == np.float64 for v in method.run(feeds).values())


def test_prepared_weights_given_as_inputs():
    # Writable weights are derived again at every call: new values in the same arrays count.
    m, feeds = model("LSTM", "bidirectional", N=1, init=True)
    for t in list(m.graph.initializer):
        a = numpy_helper.to_array(t)
        feeds[t.name] = a.copy()
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(a.shape)))
    del m.graph.initializer[:]
    method = load(m)
    assert len(refuse_kernel(method._steps)) == 1
    for scale in (1.0, 0.5, 0.5):
        for name in ("W", "R"):
            feeds[name] *= scale
        got = method.run(feeds)
        for name, w in zip(OUTPUTS["LSTM"], reference(m, feeds)):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=f"scale {scale} {name}")


def test_prepared_sequence_lens_out_of_range_is_a_shape_error():
    # The prepared call refuses it; the kernel then raises, naming the op and the value.
    m, feeds = model("GRU", "forward", T=5, N=3, lens=[5, 2, 0], init=True)
    method = load(m)
    assert any(type(s) is _PreparedOutputsStep for s in method._steps)
    method.run(feeds)
    feeds["lens"] = np.array([5, 9, 0], np.int32)
    with pytest.raises(offload.errors.ShapeError, match=r"GRU.*sequence_lens"):
        method.run(feeds)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_prepared_threads(op):
    # The call keeps its buffers per thread: four threads at once each get their own result.
    m, _ = model(op, "bidirectional", T=6, N=1)
    method = load(m)
    assert len(refuse_kernel(method._steps)) == 1
    rng = np.random.default_rng(5)
    feeds = [{"X": rng.standard_normal((6, 1, 6)).astype(np.float32)} for _ in range(4)]
    run_in_threads(method, feeds, [reference(m, f) for f in feeds], OUTPUTS[op])


def _plan_steps(method, shapes) -> list:
    plan = method._specializations.entries.get(shapes)
    assert plan is not None and not isinstance(plan, dict), shapes
    return plan.steps


@pytest.mark.parametrize("name", ["lstm_model.onnx", "gru_model.onnx"])
def test_exported_nets_in_shape_specializations(name):
    # Batch and sequence are symbolic: each tuple of input shapes gets a plan (at its second run)
    # whose recurrent ops are prepared calls; runs alternate between shapes.
    with open(os.path.join(MODELS, name), "rb") as f:
        data = f.read()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    method = offload.runtime.load(offload.save(offload.optimize(offload.load(data)))).method("forward")
    rng = np.random.default_rng(3)
    refused = set()
    for batch, seq in [(1, 16), (1, 16), (2, 7), (2, 7), (1, 16), (2, 7), (1, 5)]:
        if name == "lstm_model.onnx":
            feeds = {"tokens": rng.integers(0, 100, (batch, seq)).astype(np.int64)}
        else:
            feeds = {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32)}
        shapes = tuple(v.shape for v in feeds.values())
        if shapes in refused:
            pass
        elif isinstance(method._specializations.entries.get(shapes), dict):  # this run makes the plan
            got = method.run(feeds)
            assert len(refuse_kernel(_plan_steps(method, shapes))) == 2
            refused.add(shapes)
        got = method.run(feeds)
        for out, w in zip(session.get_outputs(), session.run(None, feeds)):
            np.testing.assert_allclose(got[out.name], w, rtol=1e-5, atol=1e-5, err_msg=f"{shapes} {out.name}")
    assert len(refused) == 2


@pytest.mark.parametrize(
    "op, direction, kwargs",
    [
        ("LSTM", "bidirectional", {"N": 3, "lens": [5, 2, 0], "init": True}),
        ("LSTM", "forward", {"H": 40}),
        ("GRU", "reverse", {"N": 2, "init": True, "layout": 1}),
        ("GRU", "bidirectional", {"H": 40, "linear_before_reset": 1}),
        ("RNN", "bidirectional", {"init": True}),
    ],
)
def test_prepared_equals_evaluate_bit_for_bit(op, direction, kwargs):
    # The prepared call runs the kernel's step loops and copies: a .pte run gives evaluate's bits,
    # and those are near an independent reference (onnxruntime; ONNX's evaluator for layout 1):
    # each of the 5 steps sums I + H = 6 + H products into the gates, and the squashing
    # functions do not magnify the error carried from step to step.
    m, feeds = model(op, direction, T=5, **kwargs)
    want = offload.evaluate(offload.load(m.SerializeToString()), feeds)
    independent = reference(m, feeds, "evaluator" if kwargs.get("layout") else "onnxruntime")
    rtol = sum_tolerance(np.float32, 5 * (6 + kwargs.get("H", 8)))
    method = load(m)
    assert len(refuse_kernel(method._steps)) == 1
    for _ in range(2):
        got = method.run(feeds)
        for name, ref in zip(OUTPUTS[op], independent):
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
            assert_close(got[name], ref, rtol=rtol, err_msg=name)
