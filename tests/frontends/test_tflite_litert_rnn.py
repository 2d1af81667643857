"""TFLite's RNN cells (frontends/tflite_rnn.py) in hand-built models against LiteRT live: two calls
of a loaded ``.pte`` (the hidden states are variable tensors LiteRT keeps between calls) against
two calls on one interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.schemas.generated.tflite.ActivationFunctionType import ActivationFunctionType as Act
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import options

Interpreter = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference").Interpreter

RNG = np.random.default_rng(20261130)
BATCH, STEPS, INPUT, UNITS = 2, 4, 3, 5


def _cell(prefix: str) -> list[T]:
    return [
        T(f"{prefix}w", [UNITS, INPUT], data=(RNG.standard_normal((UNITS, INPUT)) * 0.5).astype(np.float32)),
        T(f"{prefix}r", [UNITS, UNITS], data=(RNG.standard_normal((UNITS, UNITS)) * 0.4).astype(np.float32)),
        T(f"{prefix}b", [UNITS], data=(RNG.standard_normal(UNITS) * 0.3).astype(np.float32)),
        T(f"{prefix}h", [BATCH, UNITS], is_variable=True),
    ]


def rnn_model(act: int) -> bytes:
    tensors = [T("x", [BATCH, INPUT]), *_cell(""), T("y", [BATCH, UNITS])]
    op = Op(B.RNN, [0, 1, 2, 3, 4], [5], options("RNNOptions", fused_activation_function=act))
    return build([Graph(tensors, [op], [0], [5])])


def sequence_rnn_model(act: int, time_major: bool) -> bytes:
    seq = [STEPS, BATCH] if time_major else [BATCH, STEPS]
    tensors = [T("x", [*seq, INPUT]), *_cell(""), T("y", [*seq, UNITS])]
    opts = options("SequenceRNNOptions", fused_activation_function=act, time_major=time_major)
    op = Op(B.UNIDIRECTIONAL_SEQUENCE_RNN, [0, 1, 2, 3, 4], [5], opts)
    return build([Graph(tensors, [op], [0], [5])])


def bidirectional_rnn_model(act: int, time_major: bool, merge: bool) -> bytes:
    seq = [STEPS, BATCH] if time_major else [BATCH, STEPS]
    tensors = [T("x", [*seq, INPUT]), *_cell("fw_"), *_cell("bw_")]
    outs = [T("y", [*seq, 2 * UNITS])] if merge else [T("y_fw", [*seq, UNITS]), T("y_bw", [*seq, UNITS])]
    tensors += outs
    out_index = list(range(9, 9 + len(outs)))
    opts = options(
        "BidirectionalSequenceRNNOptions",
        fused_activation_function=act,
        time_major=time_major,
        merge_outputs=merge,
    )
    op = Op(B.BIDIRECTIONAL_SEQUENCE_RNN, list(range(9)) + [-1, -1, -1], out_index, opts)
    return build([Graph(tensors, [op], [0], out_index)])


def check_calls(data: bytes, tmp_path, calls: int = 2) -> None:
    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    (inp,) = interp.get_input_details()
    program = offload.load(data)
    offload.save(program, tmp_path / "m.pte")
    module = offload.runtime.load(str(tmp_path / "m.pte"))
    for call in range(calls):
        x = RNG.standard_normal(inp["shape"]).astype(np.float32)
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        want = {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}
        got = module.run({"x": x})
        assert sorted(got) == sorted(want)
        for name, w in want.items():
            assert got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=f"{name}, call {call}")


@pytest.mark.parametrize("act", [Act.TANH, Act.RELU, Act.NONE, Act.RELU6])
def test_rnn_step_keeps_its_state(act, tmp_path):
    check_calls(rnn_model(act), tmp_path, calls=3)


@pytest.mark.parametrize("act, time_major", [(Act.TANH, False), (Act.RELU, True), (Act.NONE, False)])
def test_unidirectional_sequence_rnn(act, time_major, tmp_path):
    check_calls(sequence_rnn_model(act, time_major), tmp_path)


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("merge", [False, True])
def test_bidirectional_sequence_rnn(time_major, merge, tmp_path):
    check_calls(bidirectional_rnn_model(Act.TANH, time_major, merge), tmp_path)


def test_sequence_rnn_with_relu6_is_refused_by_name():
    with pytest.raises(offload.errors.UnsupportedOpError, match=r"UNIDIRECTIONAL_SEQUENCE_RNN.*activation 3"):
        offload.load(sequence_rnn_model(Act.RELU6, False))
