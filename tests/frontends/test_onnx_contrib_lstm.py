"""com.microsoft::DynamicQuantizeLSTM (ir/contrib_ops.py, runtime/kernels/recurrent_quantized.py)
against onnxruntime: X and each step's hidden state quantized to uint8 on the fly, integer
products, float32 gates."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import offload
from offload import runtime
from tests.frontends.contrib_support import contrib_model, node, normal

RNG = np.random.default_rng(11)
T, N, I, H = 5, 3, 6, 4

# float32 gate arithmetic over T steps: onnxruntime's sigmoid and tanh (MLAS) and numpy's differ
# by a few ulps, the cell state adds them up. Measured on these cases: at most 2.1e-7. Leaving out
# the activations' quantization (a float LSTM of the dequantized weights) misses by 8e-3 to 3e-2
# (test_the_float_lstm_is_far_off); quantizing X over all steps where sequence_lens stop earlier,
# by 2e-2; an ended sequence's hidden state kept in the range (not 0), by 6e-4.
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}


def _weights(dtype, directions: int, rows: int, per_column: bool):
    """Quantized [D, rows, 4H] weights, their scale and zero point, and the float weights they
    stand for in LSTM's layout [D, 4H, rows] (dequantized in float64).

    The forms onnxruntime's kernel takes: per-column zero points are 0 (int8) or one value
    (uint8). int8 weights stay in [-64, 63]: onnxruntime's uint8 x int8 products on x86-64
    without VNNI saturate each sum of two neighbouring products to int16."""
    shape = (directions, 4 * H) if per_column else (directions,)
    if dtype == np.int8:
        q = RNG.integers(-64, 64, (directions, rows, 4 * H)).astype(dtype)
        zero = np.zeros(shape, dtype) if per_column else RNG.integers(-8, 8, shape).astype(dtype)
    else:
        q = RNG.integers(0, 256, (directions, rows, 4 * H)).astype(dtype)
        zero = np.full(shape, RNG.integers(100, 156), dtype)
    scale = (RNG.random(shape) * 0.02 + 0.01).astype(np.float32)
    expand = (slice(None), None, slice(None)) if per_column else (slice(None), None, None)
    real = (q.astype(np.float64) - zero[expand].astype(np.float64)) * scale[expand].astype(np.float64)
    return q, scale, zero, real.astype(np.float32).transpose(0, 2, 1).copy()


def _case(
    direction: str, dtype, per_column: bool, optional: tuple = (), outs=("y", "y_h", "y_c"), inputs=I, **attrs
):
    """The DynamicQuantizeLSTM model, the float LSTM model of its dequantized weights, the feeds."""
    d = 2 if direction == "bidirectional" else 1
    w, w_scale, w_zero, w_real = _weights(dtype, d, inputs, per_column)
    r, r_scale, r_zero, r_real = _weights(dtype, d, H, per_column)
    feeds = {"x": normal(RNG, T, N, inputs)}
    extra = {
        "b": normal(RNG, d, 8 * H, scale=0.1),
        "lens": np.array([T - 1, 2, 3], np.int32),
        "h0": normal(RNG, d, N, H, scale=0.5),
        "c0": normal(RNG, d, N, H, scale=0.5),
        "p": normal(RNG, d, 3 * H, scale=0.1),
    }
    extra = {k: v for k, v in extra.items() if k in optional}
    opt = [k if k in extra else "" for k in ("b", "lens", "h0", "c0", "p")]
    attrs = {"hidden_size": H, "direction": direction, **attrs}
    names = [o or "" for o in outs]
    graph_outs = [o for o in outs if o]
    quant = contrib_model(
        [node("DynamicQuantizeLSTM", ["x", "w", "r", *opt, "ws", "wz", "rs", "rz"], names, **attrs)],
        feeds,
        graph_outs,
        [
            ("w", w),
            ("r", r),
            ("ws", w_scale),
            ("wz", w_zero),
            ("rs", r_scale),
            ("rz", r_zero),
            *extra.items(),
        ],
    )
    plain_inputs = ["x", "w", "r", *opt]
    while plain_inputs[-1] == "":
        plain_inputs.pop()
    plain = contrib_model(
        [helper.make_node("LSTM", plain_inputs, names, **attrs)],
        feeds,
        graph_outs,
        [("w", w_real), ("r", r_real), *extra.items()],
    )
    return quant, plain, feeds


def onnxruntime_run(data: bytes, feeds: dict) -> dict:
    """onnxruntime at one thread: with more, it quantizes each thread's part of the batch alone."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _matches_onnxruntime(quant: bytes, feeds: dict) -> None:
    want = onnxruntime_run(quant, feeds)
    got = offload.evaluate(offload.load(quant), feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **TOLERANCE)


ALL = ("b", "lens", "h0", "c0", "p")
CASES = [
    ("forward", np.int8, False, ()),
    ("reverse", np.uint8, True, ALL),
    ("bidirectional", np.int8, True, ALL),
    ("bidirectional", np.uint8, False, ("b", "h0")),
    ("reverse", np.int8, False, ("lens", "c0")),
]


@pytest.mark.parametrize("direction,dtype,per_column,optional", CASES)
def test_dynamic_quantize_lstm_matches_onnxruntime(direction, dtype, per_column, optional):
    quant, _, feeds = _case(direction, dtype, per_column, optional)
    program = offload.load(quant)
    assert [op.op_type for op in program.main.body.operations] == ["DynamicQuantizeLSTM"]
    want = onnxruntime_run(quant, feeds)
    module = runtime.load(offload.save(program))
    for got in (offload.evaluate(program, feeds), module.run(feeds)):
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, err_msg=k, **TOLERANCE)


@pytest.mark.parametrize(
    "attrs",
    [
        {"clip": 0.3},
        {"input_forget": 1},
        {"activations": ["HardSigmoid", "Tanh", "Relu"], "activation_alpha": [0.3], "activation_beta": [0.4]},
    ],
)
def test_dynamic_quantize_lstm_attributes_match_onnxruntime(attrs):
    quant, _, feeds = _case("forward", np.uint8, True, ("b", "p", "c0"), **attrs)
    _matches_onnxruntime(quant, feeds)


def test_dynamic_quantize_lstm_final_states_alone():
    """Y not asked for: Y_h and Y_c still come out (every sequence runs the whole length)."""
    quant, _, feeds = _case("bidirectional", np.int8, False, ("b", "h0"), outs=("", "y_h", "y_c"))
    _matches_onnxruntime(quant, feeds)


def test_a_wide_input_product_matches_onnxruntime():
    """600 inputs of uint8 weights: the input product's terms reach 255 · 255, so it runs in
    slices of the inner axis (tests/runtime/test_recurrent_quantized.py checks them exact)."""
    quant, _, feeds = _case("forward", np.uint8, False, ("b",), inputs=600)
    _matches_onnxruntime(quant, feeds)


def test_the_float_lstm_is_far_off():
    """The float LSTM of the dequantized weights (what the import made before) misses
    onnxruntime by far more than TOLERANCE: the tests above see the activations' rounding."""
    quant, plain, feeds = _case("bidirectional", np.int8, True, ALL)
    want = onnxruntime_run(quant, feeds)
    floating = onnxruntime_run(plain, feeds)
    assert max(np.abs(floating[k] - want[k]).max() for k in want) > 100 * TOLERANCE["atol"]


def _refused(ws, wz, rs, rz, match: str) -> None:
    """A forward DynamicQuantizeLSTM of int8 weights and these scales and zero points (None for
    one left out) is refused at import with an error matching ``match``."""
    x = normal(RNG, T, N, I)
    inits = {
        "w": RNG.integers(-8, 8, (1, I, 4 * H)).astype(np.int8),
        "r": RNG.integers(-8, 8, (1, H, 4 * H)).astype(np.int8),
        "ws": ws,
        "wz": wz,
        "rs": rs,
        "rz": rz,
    }
    names = [k if v is not None else "" for k, v in inits.items()]
    lstm = node(
        "DynamicQuantizeLSTM", ["x", *names[:2], "", "", "", "", "", *names[2:]], ["y"], hidden_size=H
    )
    data = contrib_model([lstm], {"x": x}, ["y"], [(k, v) for k, v in inits.items() if v is not None])
    with pytest.raises(offload.errors.UnsupportedOpError, match=match):
        offload.load(data)


SCALE = np.array([0.01], np.float32)
ZERO = np.zeros(1, np.int8)


def test_dynamic_quantize_lstm_needs_its_scales():
    _refused(SCALE, None, SCALE, None, r"DynamicQuantizeLSTM.*W_zero_point")


def test_dynamic_quantize_lstm_zero_points_of_their_weights_type():
    _refused(
        SCALE,
        ZERO,
        SCALE,
        np.zeros(1, np.uint8),
        r"DynamicQuantizeLSTM.*'r' of int8 and zero point 'rz' of uint8",
    )


def test_dynamic_quantize_lstm_zero_points_shaped_as_their_scales():
    per_column = np.zeros((1, 4 * H), np.int8)
    _refused(
        SCALE,
        per_column,
        SCALE,
        ZERO,
        r"DynamicQuantizeLSTM.*zero point 'wz' of rank 2 and scale 'ws' of rank 1",
    )
