"""The CPU LSTM and GRU kernels' plain steps (default activations; no peepholes, clip or coupled gate).

They run the general step's arithmetic in fewer numpy calls; both, the plain step and the
general one (which an all-zero peephole input selects for the LSTM, a clip that clips nothing
for the GRU), are checked against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels import recurrent

RNG = np.random.default_rng(11)
H, I, T, N = 24, 16, 7, 3


def _serialized(node, inputs: list, outputs: tuple, inits: dict) -> bytes:
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(
        [node], "g", inputs, outs, [numpy_helper.from_array(a, n) for n, a in inits.items()]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def _lstm_model(direction: str, with_lens: bool) -> tuple[bytes, dict]:
    d = 2 if direction == "bidirectional" else 1
    inits = {
        "W": RNG.standard_normal((d, 4 * H, I)).astype(np.float32) * 0.5,
        "R": RNG.standard_normal((d, 4 * H, H)).astype(np.float32) * 0.5,
        "B": RNG.standard_normal((d, 8 * H)).astype(np.float32) * 0.5,
    }
    inputs = ["X", "W", "R", "B", "lens" if with_lens else "", "h0", "c0"]
    node = helper.make_node("LSTM", inputs, ["Y", "Y_h", "Y_c"], hidden_size=H, direction=direction)
    vi = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, N, I]),
        helper.make_tensor_value_info("h0", TensorProto.FLOAT, [d, N, H]),
        helper.make_tensor_value_info("c0", TensorProto.FLOAT, [d, N, H]),
    ]
    if with_lens:
        vi.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [N]))
    data = _serialized(node, vi, ("Y", "Y_h", "Y_c"), inits)
    feeds = {
        "X": RNG.standard_normal((T, N, I)).astype(np.float32),
        "h0": RNG.standard_normal((d, N, H)).astype(np.float32),
        "c0": RNG.standard_normal((d, N, H)).astype(np.float32),
    }
    if with_lens:
        feeds["lens"] = np.array([T, 3, 0], np.int32)
    return data, feeds


@pytest.mark.parametrize("with_lens", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_plain_and_general_lstm_match_onnxruntime(direction, with_lens):
    data, feeds = _lstm_model(direction, with_lens)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip(["Y", "Y_h", "Y_c"], session.run(None, feeds)))
    got = offload.evaluate(offload.load(data), feeds)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
    program = offload.load(data)
    consts = program.main.body.constants
    args = [feeds["X"], consts["W"].const_value, consts["R"].const_value, consts["B"].const_value]
    args += [feeds.get("lens"), feeds["h0"], feeds["c0"]]
    d = 2 if direction == "bidirectional" else 1
    kw = dict(
        activation_alpha=None, activation_beta=None, activations=None, clip=None,
        direction=direction, hidden_size=H, input_forget=0, layout=0,
    )  # fmt: skip
    plain = recurrent.lstm(None, *args, None, **kw)
    general = recurrent.lstm(None, *args, np.zeros((d, 3 * H), np.float32), **kw)
    for k, a, b in zip(want, plain, general):
        np.testing.assert_allclose(a, want[k], rtol=1e-5, atol=1e-6, err_msg=f"plain {k}")
        np.testing.assert_allclose(b, want[k], rtol=1e-5, atol=1e-6, err_msg=f"general {k}")


def _gru_model(direction: str, linear_before_reset: int) -> tuple[bytes, dict]:
    d = 2 if direction == "bidirectional" else 1
    inits = {
        "W": RNG.standard_normal((d, 3 * H, I)).astype(np.float32) * 0.5,
        "R": RNG.standard_normal((d, 3 * H, H)).astype(np.float32) * 0.5,
        "B": RNG.standard_normal((d, 6 * H)).astype(np.float32) * 0.5,
    }
    node = helper.make_node(
        "GRU",
        ["X", "W", "R", "B", "", "h0"],
        ["Y", "Y_h"],
        hidden_size=H,
        direction=direction,
        linear_before_reset=linear_before_reset,
    )
    vi = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [T, N, I]),
        helper.make_tensor_value_info("h0", TensorProto.FLOAT, [d, N, H]),
    ]
    data = _serialized(node, vi, ("Y", "Y_h"), inits)
    feeds = {
        "X": RNG.standard_normal((T, N, I)).astype(np.float32),
        "h0": RNG.standard_normal((d, N, H)).astype(np.float32),
    }
    return data, feeds


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_plain_and_general_gru_match_onnxruntime(direction, linear_before_reset):
    data, feeds = _gru_model(direction, linear_before_reset)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip(["Y", "Y_h"], session.run(None, feeds)))
    got = offload.evaluate(offload.load(data), feeds)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-6, err_msg=k)
    consts = offload.load(data).main.body.constants
    args = [feeds["X"], consts["W"].const_value, consts["R"].const_value, consts["B"].const_value]
    kw = dict(
        activation_alpha=None, activation_beta=None, activations=None, direction=direction,
        hidden_size=H, layout=0, linear_before_reset=linear_before_reset,
    )  # fmt: skip
    plain = recurrent.gru(None, *args, None, feeds["h0"], clip=None, **kw)
    general = recurrent.gru(None, *args, None, feeds["h0"], clip=1e30, **kw)  # a clip that clips nothing
    for k, a, b in zip(want, plain, general):
        np.testing.assert_allclose(a, want[k], rtol=1e-5, atol=1e-6, err_msg=f"plain {k}")
        np.testing.assert_allclose(b, want[k], rtol=1e-5, atol=1e-6, err_msg=f"general {k}")
