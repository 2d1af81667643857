"""onnxruntime's com.microsoft quantized ops as ONNX quantization ops (frontends/onnx_contrib_quant.py),
against onnxruntime running the same one-node models."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from tests.frontends.contrib_support import SUMS, compare, contrib_model, node, normal, onnxruntime_run

RNG = np.random.default_rng(7)


def _q(dtype, *shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _requantized(data: bytes, feeds: dict) -> None:
    """Quantized outputs: onnxruntime requantizes through scale ratios (MLAS) or a 256-entry table,
    offload rounds the float32 result of the float op; the two round apart by one step where the
    exact value lies within float32 rounding of a tie (x.5 steps), and nowhere else."""
    want = onnxruntime_run(data, feeds)
    program = offload.load(data)
    (quantize,) = [op for op in program.main.body.operations if op.op_type == "QuantizeLinear"]
    seen = {}
    got = offload.evaluate(program, feeds, observe=lambda v, a: seen.__setitem__(v.name, a))
    scale, zero = (np.float64(v.const_value) for v in quantize.inputs[1:3])
    steps = seen[quantize.inputs[0].name].astype(np.float64) / scale + zero
    near_tie = np.abs(steps - np.floor(steps) - 0.5) < 1e-3
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, got[k].shape, v.shape)
        diff = np.abs(got[k].astype(np.int64) - v.astype(np.int64))
        assert diff.max() <= 1, (k, diff.max())
        assert np.all(near_tie[diff > 0]), (k, steps[(diff > 0) & ~near_tie][:5])


# onnxruntime's uint8 x int8 products on x86-64 without VNNI (pmaddubsw) saturate each sum of two
# neighbouring products to int16, which its quantization docs point out; offload's sums are exact.
# The u8 x s8 cases keep every pair sum within int16: A in [0, 127] (onnxruntime's reduce_range),
# or B in [-64, 63] where A is quantized at run time.
def _unsaturated(dtype, *shape) -> np.ndarray:
    return RNG.integers(0, 128, shape).astype(dtype)


@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize(
    "per_column,with_zero,with_bias", [(False, True, True), (True, True, False), (False, False, False)]
)
def test_matmul_integer_to_float(a_type, b_type, per_column, with_zero, with_bias):
    k, n = 8, 6
    feeds = {
        "a": _unsaturated(a_type, 2, 3, k) if (a_type, b_type) == (np.uint8, np.int8) else _q(a_type, 2, 3, k)
    }
    inits = [
        ("b", _q(b_type, k, n)),
        ("a_scale", np.float32(0.02)),
        ("b_scale", (RNG.random(n) * 0.05 + 0.01).astype(np.float32) if per_column else np.float32(0.03)),
        ("a_zero", a_type(3)),
        ("b_zero", _q(b_type, n) if per_column else b_type(-2 if b_type == np.int8 else 5)),
        ("bias", normal(RNG, n)),
    ]
    inputs = ["a", "b", "a_scale", "b_scale"] + (["a_zero", "b_zero"] if with_zero else ["", ""])
    inputs += ["bias"] if with_bias else []
    while inputs[-1] == "":
        inputs.pop()
    data = contrib_model([node("MatMulIntegerToFloat", inputs, ["y"])], feeds, ["y"], inits)
    compare(data, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("b_type", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "per_column,with_zero,with_bias", [(False, True, True), (True, True, True), (False, False, False)]
)
def test_dynamic_quantize_matmul(b_type, per_column, with_zero, with_bias):
    k, n = 16, 5
    feeds = {"a": normal(RNG, 3, 4, k, scale=2.0)}
    b = RNG.integers(-64, 64, (k, n)).astype(np.int8) if b_type == np.int8 else _q(b_type, k, n)
    inits = [
        ("b", b),
        ("b_scale", (RNG.random(n) * 0.05 + 0.01).astype(np.float32) if per_column else np.float32(0.03)),
        (
            "b_zero",
            RNG.integers(-64, 64, n).astype(np.int8)
            if b_type == np.int8 and per_column
            else (_q(b_type, n) if per_column else b_type(1)),
        ),
        ("bias", normal(RNG, n)),
    ]
    inputs = ["a", "b", "b_scale", "b_zero" if with_zero else "", "bias" if with_bias else ""]
    while inputs[-1] == "":
        inputs.pop()
    data = contrib_model([node("DynamicQuantizeMatMul", inputs, ["y"])], feeds, ["y"], inits)
    # the same uint8 A as onnxruntime's, int32 sums exact: float32 rounding of the scale products
    compare(data, feeds, **SUMS)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("b_shape", [(2, 3, 8), (8,)])
def test_qlinear_binary(dtype, op, b_shape):
    feeds = {"a": _q(dtype, 2, 3, 8), "b": _q(dtype, *b_shape)}
    inits = [
        ("a_scale", np.float32(0.05)),
        ("a_zero", dtype(4)),
        ("b_scale", np.float32(0.07)),
        ("b_zero", dtype(-3 if dtype == np.int8 else 130)),
        ("c_scale", np.float32(0.1 if op == "QLinearAdd" else 0.5)),
        ("c_zero", dtype(2)),
    ]
    inputs = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c_scale", "c_zero"]
    data = contrib_model([node(op, inputs, ["y"])], feeds, [("y", dtype)], inits)
    _requantized(data, feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})])
def test_qlinear_unary(dtype, op, attrs):
    feeds = {"x": _q(dtype, 4, 64)}
    inits = [
        ("x_scale", np.float32(0.05)),
        ("x_zero", dtype(7)),
        ("y_scale", np.float32(0.004)),
        ("y_zero", dtype(-100 if dtype == np.int8 else 10)),
    ]
    data = contrib_model(
        [node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], **attrs)],
        feeds,
        [("y", dtype)],
        inits,
    )
    _requantized(data, feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize(
    "op,attrs",
    [
        ("QLinearGlobalAveragePool", {}),
        ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("QLinearAveragePool", {"kernel_shape": [2, 2], "count_include_pad": 1, "pads": [1, 0, 1, 0]}),
    ],
)
def test_qlinear_pools(dtype, channels_last, op, attrs):
    shape = (2, 7, 6, 3) if channels_last else (2, 3, 7, 6)
    feeds = {"x": _q(dtype, *shape)}
    inits = [
        ("x_scale", np.float32(0.05)),
        ("x_zero", dtype(7)),
        ("y_scale", np.float32(0.03)),
        ("y_zero", dtype(-5 if dtype == np.int8 else 9)),
    ]
    n = node(op, ["x", "x_scale", "x_zero", "y_scale", "y_zero"], ["y"], channels_last=channels_last, **attrs)
    data = contrib_model([n], feeds, [("y", dtype)], inits)
    _requantized(data, feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(dtype):
    feeds = {"a": _q(dtype, 2, 3, 4), "b": _q(dtype, 2, 5, 4)}
    inits = [
        ("y_scale", np.float32(0.05)),
        ("y_zero", dtype(3)),
        ("a_scale", np.float32(0.05)),
        ("a_zero", dtype(3)),
        ("b_scale", np.float32(0.11)),
        ("b_zero", dtype(-7 if dtype == np.int8 else 120)),
    ]
    inputs = ["y_scale", "y_zero", "a", "a_scale", "a_zero", "b", "b_scale", "b_zero"]
    data = contrib_model([node("QLinearConcat", inputs, ["y"], axis=1)], feeds, [("y", dtype)], inits)
    _requantized(data, feeds)


@pytest.mark.parametrize("b_type", [np.uint8, np.int8])
@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 0, 1.0), (1, 1, 0.5), (0, 1, 2.0)])
@pytest.mark.parametrize("with_c,quantized", [(True, True), (False, False), (True, False)])
def test_qgemm(b_type, trans_a, trans_b, alpha, with_c, quantized):
    m, k, n = 4, 8, 5
    a_shape = (k, m) if trans_a else (m, k)
    feeds = {"a": _unsaturated(np.uint8, *a_shape) if b_type == np.int8 else _q(np.uint8, *a_shape)}
    inits = [
        ("a_scale", np.float32(0.02)),
        ("a_zero", np.uint8(120)),
        ("b", _q(b_type, *((n, k) if trans_b else (k, n)))),
        ("b_scale", np.float32(0.03)),
        ("b_zero", b_type(2)),
        ("c", RNG.integers(-500, 500, n).astype(np.int32)),
        ("y_scale", np.float32(0.5)),
        ("y_zero", np.uint8(128)),
    ]
    inputs = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "c" if with_c else ""]
    inputs += ["y_scale", "y_zero"] if quantized else []
    while inputs[-1] == "":
        inputs.pop()
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha}
    out = [("y", np.uint8)] if quantized else ["y"]
    data = contrib_model([node("QGemm", inputs, ["y"], **attrs)], feeds, out, inits)
    if quantized:
        _requantized(data, feeds)
    else:
        compare(data, feeds, rtol=1e-6, atol=1e-6)
