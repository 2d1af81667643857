"""com.microsoft::DynamicQuantizeLSTM as a float LSTM of its dequantized weights
(frontends/onnx_contrib_quant.py), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from tests.frontends.contrib_support import SUMS, contrib_model, node, normal, onnxruntime_run

RNG = np.random.default_rng(11)
T, N, I, H = 5, 3, 6, 4


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
    scale = (RNG.random(shape) * 0.004 + 0.002).astype(np.float32)
    expand = (slice(None), None, slice(None)) if per_column else (slice(None), None, None)
    real = (q.astype(np.float64) - zero[expand].astype(np.float64)) * scale[expand].astype(np.float64)
    return q, scale, zero, real.astype(np.float32).transpose(0, 2, 1).copy()


def _case(direction: str, dtype, per_column: bool, optional: bool):
    """The DynamicQuantizeLSTM model, the float LSTM model of its dequantized weights, the feeds."""
    d = 2 if direction == "bidirectional" else 1
    w, w_scale, w_zero, w_real = _weights(dtype, d, I, per_column)
    r, r_scale, r_zero, r_real = _weights(dtype, d, H, per_column)
    feeds = {"x": normal(RNG, T, N, I)}
    extra = {}
    if optional:
        extra = {
            "b": normal(RNG, d, 8 * H, scale=0.1),
            "lens": np.array([T, 2, 4], np.int32),
            "h0": normal(RNG, d, N, H, scale=0.5),
            "c0": normal(RNG, d, N, H, scale=0.5),
            "p": normal(RNG, d, 3 * H, scale=0.1),
        }
    opt = [k if k in extra else "" for k in ("b", "lens", "h0", "c0", "p")]
    attrs = {"hidden_size": H, "direction": direction}
    outs = ["y", "y_h", "y_c"]
    quant = contrib_model(
        [node("DynamicQuantizeLSTM", ["x", "w", "r", *opt, "ws", "wz", "rs", "rz"], outs, **attrs)],
        feeds,
        outs,
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
        [helper.make_node("LSTM", plain_inputs, outs, **attrs)],
        feeds,
        outs,
        [("w", w_real), ("r", r_real), *extra.items()],
    )
    return quant, plain, feeds, (w_real, r_real)


CASES = [
    ("forward", np.int8, False, False),
    ("reverse", np.uint8, True, True),
    ("bidirectional", np.int8, True, True),
    ("bidirectional", np.uint8, False, True),
]


@pytest.mark.parametrize("direction,dtype,per_column,optional", CASES)
def test_dynamic_quantize_lstm_is_the_lstm_of_its_dequantized_weights(direction, dtype, per_column, optional):
    quant, plain, feeds, _ = _case(direction, dtype, per_column, optional)
    program = offload.load(quant)
    assert [op.op_type for op in program.main.body.operations].count("LSTM") == 1
    want = onnxruntime_run(plain, feeds)
    got = offload.evaluate(program, feeds)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **SUMS)


@pytest.mark.parametrize("direction,dtype,per_column,optional", CASES)
def test_dynamic_quantize_lstm_within_activation_rounding_of_onnxruntime(
    direction, dtype, per_column, optional
):
    """onnxruntime's kernel rounds X and each step's hidden state to uint8 (steps of range/255,
    h within (-1, 1)) before its integer products; offload multiplies in float. Each rounding is
    an independent error of deviation step/sqrt(12), so a gate's input moves by about
    sigma = (x_step * |W column|_2 + h_step * |R column|_2) / sqrt(12); the cell state adds the
    moves of T steps (sqrt(T) sigma). Measured: at most 0.8 sigma; a wrong weight layout is off
    by the outputs' own size (0.3 here, 60 sigma)."""
    quant, _, feeds, (w_real, r_real) = _case(direction, dtype, per_column, optional)
    x = feeds["x"].astype(np.float64)
    x_step = (max(x.max(), 0) - min(x.min(), 0)) / 255
    w_norm = np.sqrt((w_real.astype(np.float64) ** 2).sum(axis=2).max())
    r_norm = np.sqrt((r_real.astype(np.float64) ** 2).sum(axis=2).max())
    sigma = (x_step * w_norm + (2 / 255) * r_norm) / np.sqrt(12)
    want = onnxruntime_run(quant, feeds)
    got = offload.evaluate(offload.load(quant), feeds)
    for k, v in want.items():
        err = np.abs(got[k].astype(np.float64) - v).max()
        assert err <= 2 * np.sqrt(T) * sigma, (k, err, sigma)


def test_dynamic_quantize_lstm_needs_its_scales():
    x = normal(RNG, T, N, I)
    w = RNG.integers(-8, 8, (1, I, 4 * H)).astype(np.int8)
    r = RNG.integers(-8, 8, (1, H, 4 * H)).astype(np.int8)
    graph = helper.make_graph(
        [
            node(
                "DynamicQuantizeLSTM",
                ["x", "w", "r", "", "", "", "", "", "ws", "", "rs", ""],
                ["y"],
                hidden_size=H,
            )
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(r, "r"),
            numpy_helper.from_array(np.array([0.01], np.float32), "ws"),
            numpy_helper.from_array(np.array([0.01], np.float32), "rs"),
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    data = helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()
    with pytest.raises(offload.errors.UnsupportedOpError, match=r"DynamicQuantizeLSTM.*W_zero_point"):
        offload.load(data)
