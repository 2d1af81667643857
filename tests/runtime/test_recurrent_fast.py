"""The CPU RNN, GRU and LSTM kernels (runtime/kernels/recurrent.py) against onnxruntime.

Every case runs through ``offload.evaluate`` and through a saved and loaded .pte (whose weights
are read-only constants, so the kernels keep their derived weights between runs: each .pte runs
twice); both must match onnxruntime's CPU provider (float32, rtol = atol = 1e-5). Layout 1,
which onnxruntime refuses, is checked against ONNX's reference evaluator (which ignores
sequence_lens, so those cases give none).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import offload

from .harness import concurrently

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTPUTS = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}


def model(
    op, direction="forward", T=5, N=1, H=8, I=6, *, lens=None, init=False, P=False, layout=0, seed=0, **attrs
):
    """A one-node model: its bytes and feeds. ``lens``: the sequence lengths (a list) or None;
    ``init``: initial states as inputs; ``P``: LSTM peepholes; ``attrs``: the node's other
    attributes."""
    rng = np.random.default_rng(seed)
    D, G = 2 if direction == "bidirectional" else 1, GATES[op]
    inits = {
        "W": rng.standard_normal((D, G * H, I)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((D, G * H, H)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((D, 2 * G * H)).astype(np.float32) * 0.5,
    }
    if P:
        inits["P"] = rng.standard_normal((D, 3 * H)).astype(np.float32) * 0.5
    x_shape = [N, T, I] if layout else [T, N, I]
    s_shape = [N, D, H] if layout else [D, N, H]
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    vi = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "B", "", ""]
    if lens is not None:
        names[4] = "lens"
        feeds["lens"] = np.array(lens, np.int32)
        vi.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [N]))
    if init:
        names[5] = "h0"
        feeds["h0"] = rng.standard_normal(s_shape).astype(np.float32)
        vi.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, s_shape))
    if op == "LSTM":
        names += ["c0" if init else "", "P" if P else ""]
        if init:
            feeds["c0"] = rng.standard_normal(s_shape).astype(np.float32)
            vi.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, s_shape))
    while names[-1] == "":
        names.pop()
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(op, names, list(OUTPUTS[op]), hidden_size=H, direction=direction, **attrs)
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in OUTPUTS[op]]
    consts = [numpy_helper.from_array(a, n) for n, a in inits.items()]
    graph = helper.make_graph([node], "g", vi, outs, consts)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return m, feeds


def as_float64(m, feeds: dict) -> tuple:
    """The model and feeds of ``model`` in float64 (weights, inputs and outputs)."""
    for t in m.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for v in [*m.graph.input, *m.graph.output]:
        v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m, {k: v.astype(np.float64) for k, v in feeds.items()}


def check(op, m, feeds, reference="onnxruntime"):
    if reference == "onnxruntime":
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
    else:
        want = ReferenceEvaluator(m).run(None, feeds)
    data = m.SerializeToString()
    runs = [("evaluate", offload.evaluate(offload.load(data), feeds))]
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    runs += [(f"pte run {k}", method.run(feeds)) for k in (1, 2)]
    for how, got in runs:
        for name, w in zip(OUTPUTS[op], want):
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=f"{op} {how} {name}")


DIRECTIONS = ["forward", "reverse", "bidirectional"]


@pytest.mark.parametrize("N", [1, 3])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_default_activations(op, direction, N):
    check(op, *model(op, direction, N=N, init=N == 3))


@pytest.mark.parametrize("H", [8, 40])  # both ways of taking the recurrent product
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction, lbr, H):
    check("GRU", *model("GRU", direction, H=H, init=True, linear_before_reset=lbr))


@pytest.mark.parametrize("H", [8, 40])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_sequence_lens_shorter_than_the_sequence(op, direction, H):
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    check(op, *model(op, direction, T=6, N=4, H=H, lens=[6, 3, 0, 1], init=True, **attrs))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_sequence_lens_all_full(op):
    check(op, *model(op, "bidirectional", T=4, N=2, lens=[4, 4], init=True))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_zero_length_sequences(op):
    # A sequence of length zero has no last step: its final states are zeros, as in onnxruntime.
    check(op, *model(op, "bidirectional", T=0, N=2, lens=[0, 0], init=True))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_zero_steps_without_sequence_lens(op):
    # onnxruntime leaves the final states of an empty X unwritten (or crashes, for a GRU), so the
    # reference is its result for the same X with every sequence length given as zero.
    m, feeds = model(op, "bidirectional", T=0, N=2, lens=[0, 0], init=True)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    del feeds["lens"]
    m.graph.node[0].input[4] = ""
    del m.graph.input[1]
    got = offload.evaluate(offload.load(m.SerializeToString()), feeds)
    for name, w in zip(OUTPUTS[op], want):
        assert got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op, direction):
    check(op, *model(op, direction, init=True, clip=0.7))


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes(direction):
    check("LSTM", *model("LSTM", direction, N=2, init=True, P=True))


def test_lstm_input_forget():
    check("LSTM", *model("LSTM", "bidirectional", N=2, init=True, P=True, input_forget=1))


ACTIVATIONS = {
    "RNN": (["Relu"], [], []),
    "GRU": (["HardSigmoid", "Softsign"], [0.3], [0.4]),
    "LSTM": (["HardSigmoid", "ScaledTanh", "Softplus"], [0.3, 0.9], [0.4, 1.1]),
}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_other_activations(op, direction="bidirectional"):
    names, alphas, betas = ACTIVATIONS[op]
    attrs = {"activations": names * 2}
    if alphas:
        attrs.update(activation_alpha=alphas * 2, activation_beta=betas * 2)
    check(op, *model(op, direction, N=2, init=True, **attrs))


def test_lstm_activations_per_direction():
    acts = ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "LeakyRelu", "Tanh"]
    check("LSTM", *model("LSTM", "bidirectional", init=True, activations=acts, activation_alpha=[0.2, 0.1]))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1(op, direction):
    check(op, *model(op, direction, N=3, init=True, layout=1), reference="onnx")


def test_two_models_in_one_process_keep_their_own_weights():
    # Derived weights are kept per constant array: two .pte's with the same shapes stay apart.
    for seed in (1, 2, 1):
        check("LSTM", *model("LSTM", "bidirectional", seed=seed))


def test_wrong_initial_state_shape_is_a_shape_error():
    m, feeds = model("GRU", "forward", N=2, init=True)
    feeds["h0"] = feeds["h0"][:, :1]
    with pytest.raises(offload.errors.OffloadError, match=r"h0|initial_h|shape"):
        offload.evaluate(offload.load(m.SerializeToString()), feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float64_against_the_reference_evaluator(op):
    # onnxruntime has no double recurrent kernels; ONNX's reference evaluator computes them.
    m, feeds = as_float64(*model(op, "bidirectional", N=2, init=True))
    want = ReferenceEvaluator(m).run(None, feeds)
    got = offload.evaluate(offload.load(m.SerializeToString()), feeds)
    for name, w in zip(OUTPUTS[op], want):
        assert got[name].dtype == np.float64, name
        np.testing.assert_allclose(got[name], w, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_threads_running_one_pte_at_once(op):
    # Plain calls keep their buffers per thread: four threads running the same .pte on different
    # inputs at once each get onnxruntime's result for their own input.
    m, _ = model(op, "bidirectional", T=6, N=1)
    data = m.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    rng = np.random.default_rng(5)
    feeds = [{"X": rng.standard_normal((6, 1, 6)).astype(np.float32)} for _ in range(4)]
    run_in_threads(method, feeds, [session.run(None, f) for f in feeds], OUTPUTS[op])


def run_in_threads(method, feeds: list, want: list, names: list) -> None:
    """One thread per feed, all at once, each running ``method`` 20 times and checking its
    outputs ``names`` against ``want`` for its own feed (an exception in a thread fails the test)."""

    def work(k):
        for _ in range(20):
            got = method.run(feeds[k])
            for name, w in zip(names, want[k]):
                np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=f"thread {k} {name}")

    concurrently(work, len(feeds))
