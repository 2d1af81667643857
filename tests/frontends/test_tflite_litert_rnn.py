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


def check_calls(data: bytes, tmp_path, calls: int = 2, reference: bytes | None = None, merge=None) -> None:
    """``calls`` runs of the loaded .pte against as many LiteRT calls on one interpreter of
    ``reference`` (``data`` by default), its outputs joined by ``merge`` when given."""
    interp = Interpreter(model_content=reference or data)
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
        want = merge(want) if merge else want
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


def _lstm_cell(
    tensors: list, prefix: str, n_in: int, n_cell: int, peepholes: bool, projection: int, rng=None
) -> list:
    """The 17 cell inputs of an LSTM (weights i, f, c, o; recurrent weights; peepholes i, f, o;
    biases; projection weights and bias), appended to ``tensors``; their indices (-1 omitted)."""
    n_out = projection or n_cell

    def add(name, *shape):
        tensors.append(
            T(
                f"{prefix}{name}",
                list(shape),
                data=((rng or RNG).standard_normal(shape) * 0.6).astype(np.float32),
            )
        )
        return len(tensors) - 1

    picks = [add(f"w_{g}", n_cell, n_in) for g in "ifco"] + [add(f"r_{g}", n_cell, n_out) for g in "ifco"]
    picks += [add(f"p_{g}", n_cell) if peepholes else -1 for g in "ifo"]
    picks += [add(f"b_{g}", n_cell) for g in "ifco"]
    picks += [add("proj_w", n_out, n_cell), add("proj_b", n_out)] if projection else [-1, -1]
    return picks


def _state(tensors: list, name: str, size: int) -> int:
    tensors.append(T(name, [BATCH, size], is_variable=True))
    return len(tensors) - 1


@pytest.mark.parametrize("peepholes, projection, clip", [(False, 0, 0.0), (True, 3, 0.8)])
def test_lstm_step_keeps_its_states(peepholes, projection, clip, tmp_path):
    tensors = [T("x", [BATCH, INPUT])]
    inputs = [0, *_lstm_cell(tensors, "", INPUT, UNITS, peepholes, projection)]
    inputs += [_state(tensors, "h", projection or UNITS), _state(tensors, "c", UNITS), -1, -1, -1, -1]
    tensors.append(T("y", [BATCH, projection or UNITS]))
    opts = options("LSTMOptions", fused_activation_function=Act.TANH, cell_clip=clip, proj_clip=clip)
    op = Op(B.LSTM, inputs, [len(tensors) - 1], opts)
    check_calls(build([Graph(tensors, [op], [0], [len(tensors) - 1])]), tmp_path, calls=3)


def bidirectional_lstm_model(time_major: bool, merge: bool, seed: int) -> bytes:
    rng = np.random.default_rng(seed)  # the same weights for the same seed
    seq = [STEPS, BATCH] if time_major else [BATCH, STEPS]
    tensors = [T("x", [*seq, INPUT])]
    inputs = [
        0,
        *_lstm_cell(tensors, "fw_", INPUT, UNITS, False, 0, rng),
        *_lstm_cell(tensors, "bw_", INPUT, UNITS, True, 0, rng),
    ]
    inputs += [_state(tensors, name, UNITS) for name in ("fw_h", "fw_c", "bw_h", "bw_c")] + [-1] * 9
    outs = [T("y", [*seq, 2 * UNITS])] if merge else [T("y_fw", [*seq, UNITS]), T("y_bw", [*seq, UNITS])]
    tensors += outs
    out_index = list(range(len(tensors) - len(outs), len(tensors)))
    opts = options(
        "BidirectionalSequenceLSTMOptions",
        fused_activation_function=Act.TANH,
        cell_clip=0.0,
        proj_clip=0.0,
        merge_outputs=merge,
        time_major=time_major,
    )
    op = Op(B.BIDIRECTIONAL_SEQUENCE_LSTM, inputs, out_index, opts)
    return build([Graph(tensors, [op], [0], out_index)])


@pytest.mark.parametrize("time_major, merge", [(False, False), (True, False), (True, True)])
def test_bidirectional_sequence_lstm(time_major, merge, tmp_path):
    check_calls(bidirectional_lstm_model(time_major, merge, seed=7), tmp_path)


def test_bidirectional_sequence_lstm_merged_batch_major_is_its_two_outputs_side_by_side(tmp_path):
    """LiteRT's merged batch-major output is not its own two outputs side by side (its backward
    half differs); offload gives them side by side, checked against LiteRT's unmerged model."""
    merged, apart = (bidirectional_lstm_model(False, m, seed=7) for m in (True, False))

    def side_by_side(outputs):
        return {"y": np.concatenate([outputs["y_fw"], outputs["y_bw"]], axis=-1)}

    check_calls(merged, tmp_path, reference=apart, merge=side_by_side)


@pytest.mark.parametrize("rank, act, bias", [(1, Act.NONE, True), (2, Act.RELU, False)])
def test_svdf_remembers_its_last_steps(rank, act, bias, tmp_path):
    filters, memory = 6, 3
    tensors = [
        T("x", [BATCH, INPUT]),
        T("wf", [filters, INPUT], data=RNG.standard_normal((filters, INPUT)).astype(np.float32)),
        T("wt", [filters, memory], data=RNG.standard_normal((filters, memory)).astype(np.float32)),
    ]
    inputs = [0, 1, 2]
    if bias:
        tensors.append(
            T("b", [filters // rank], data=RNG.standard_normal(filters // rank).astype(np.float32))
        )
    inputs.append(len(tensors) - 1 if bias else -1)
    tensors += [T("state", [BATCH, filters * memory], is_variable=True), T("y", [BATCH, filters // rank])]
    inputs.append(len(tensors) - 2)
    op = Op(
        B.SVDF, inputs, [len(tensors) - 1], options("SVDFOptions", rank=rank, fused_activation_function=act)
    )
    check_calls(build([Graph(tensors, [op], [0], [len(tensors) - 1])]), tmp_path, calls=5)
