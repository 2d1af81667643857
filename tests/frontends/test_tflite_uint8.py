"""uint8 full-integer TFLite operators (the legacy TF1 quantized models: uint8 activations and
weights with nonzero zero points, int32 biases) against LiteRT live: each operator with a rule
in ``frontends.tflite_int8.UINT8_RULES`` is equal to LiteRT's uint8 output (0 units) on a batch
of seeded inputs, through ``evaluate`` and a ``.pte``; a small uint8 chain is equal end to end;
on opencl the model runs as float within a unit or two of LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from offload.schemas.generated.tflite.TensorType import TensorType as TT
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import check, litert, options

U8 = TT.UINT8
BATCH = 8  # seeded inputs, one batch: one run each side


def _weights(rng, shape) -> np.ndarray:
    return rng.integers(0, 256, shape).astype(np.uint8)


def _bias(rng, n) -> np.ndarray:
    return rng.integers(-3000, 3000, n).astype(np.int32)


def conv_model(rng, depthwise=False, stride=1, padding=0, act=1, cin=8, cout=16, size=9) -> bytes:
    """CONV_2D (or DEPTHWISE_CONV_2D, multiplier cout // cin) 3 x 3 on uint8, weight zero point
    131, input zero point 120; ``padding`` 0 SAME, 1 VALID; ``act`` the fused activation."""
    xs, ws = 0.02, 0.005
    w_shape = [1, 3, 3, cout] if depthwise else [cout, 3, 3, cin]
    out = -(-size // stride) if padding == 0 else (size - 3) // stride + 1
    ts = [
        T("x", [BATCH, size, size, cin], U8, quant=(xs, 120)),
        T("w", w_shape, U8, data=_weights(rng, w_shape), quant=(ws, 131)),
        T("b", [cout], TT.INT32, data=_bias(rng, cout), quant=(xs * ws, 0)),
        T("y", [BATCH, out, out, cout], U8, quant=(0.3, 110)),
    ]
    common = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function=act)
    if depthwise:
        op = Op(
            B.DEPTHWISE_CONV_2D,
            [0, 1, 2],
            [3],
            options("DepthwiseConv2DOptions", depth_multiplier=cout // cin, **common),
        )
    else:
        op = Op(B.CONV_2D, [0, 1, 2], [3], options("Conv2DOptions", **common))
    return build([Graph(ts, [op], [0], [3])])


def fc_model(rng, act=0, k=64, n=48) -> bytes:
    xs, ws = 0.02, 0.004
    ts = [
        T("x", [BATCH, k], U8, quant=(xs, 128)),
        T("w", [n, k], U8, data=_weights(rng, (n, k)), quant=(ws, 125)),
        T("b", [n], TT.INT32, data=_bias(rng, n), quant=(xs * ws, 0)),
        T("y", [BATCH, n], U8, quant=(0.2, 100)),
    ]
    op = Op(
        B.FULLY_CONNECTED, [0, 1, 2], [3], options("FullyConnectedOptions", fused_activation_function=act)
    )
    return build([Graph(ts, [op], [0], [3])])


BINARY = {"add": (B.ADD, "AddOptions"), "sub": (B.SUB, "SubOptions"), "mul": (B.MUL, "MulOptions")}
BINARY["div"] = (B.DIV, "DivOptions")


def binary_model(name="add", act=0, shape=(BATCH, 6, 6, 8)) -> bytes:
    code, table = BINARY[name]
    ts = [
        T("a", list(shape), U8, quant=(0.05, 100)),
        T("b", list(shape), U8, quant=(0.031, 140)),
        T("y", list(shape), U8, quant=(0.07, 90)),
    ]
    op = Op(code, [0, 1], [2], options(table, fused_activation_function=act))
    return build([Graph(ts, [op], [0, 1], [2])])


def reduce_model(code, axes, y_quant, shape=(BATCH, 7, 7, 8)) -> bytes:
    out = [1 if i in axes else d for i, d in enumerate(shape)]
    ts = [
        T("x", list(shape), U8, quant=(0.05, 100)),
        T("axes", [len(axes)], TT.INT32, data=np.array(axes, np.int32)),
        T("y", out, U8, quant=y_quant),
    ]
    return build([Graph(ts, [Op(code, [0, 1], [2], options("ReducerOptions", keep_dims=True))], [0], [2])])


def resize_model(half_pixel: bool) -> bytes:
    ts = [
        T("x", [BATCH, 5, 5, 8], U8, quant=(0.05, 100)),
        T("size", [2], TT.INT32, data=np.array([9, 11], np.int32)),
        T("y", [BATCH, 9, 11, 8], U8, quant=(0.05, 100)),
    ]
    opts = options("ResizeBilinearOptions", half_pixel_centers=half_pixel)
    return build([Graph(ts, [Op(B.RESIZE_BILINEAR, [0, 1], [2], opts)], [0], [2])])


def pool_model(padding=0, size=3, stride=2, act=0) -> bytes:
    out = -(-9 // stride) if padding == 0 else (9 - size) // stride + 1
    ts = [T("x", [BATCH, 9, 9, 8], U8, quant=(0.04, 77)), T("y", [BATCH, out, out, 8], U8, quant=(0.04, 77))]
    opts = options(
        "Pool2DOptions",
        padding=padding,
        stride_w=stride,
        stride_h=stride,
        filter_width=size,
        filter_height=size,
        fused_activation_function=act,
    )
    return build([Graph(ts, [Op(B.AVERAGE_POOL_2D, [0], [1], opts)], [0], [1])])


def unary_model(code, y_quant, opts=None) -> bytes:
    ts = [T("x", [BATCH, 256], U8, quant=(0.045, 131)), T("y", [BATCH, 256], U8, quant=y_quant)]
    return build([Graph(ts, [Op(code, [0], [1], opts)], [0], [1])])


UNARY = {  # LiteRT's uint8 LOGISTIC and TANH take these output scales and zero points only
    "logistic": (B.LOGISTIC, (1 / 256, 0), None),
    "tanh": (B.TANH, (1 / 128, 128), None),
    "relu": (B.RELU, (0.03, 10), None),
    "relu6": (B.RELU6, (0.03, 10), None),
    "relu_n1_to_1": (B.RELU_N1_TO_1, (0.01, 128), None),
    "leaky_relu": (B.LEAKY_RELU, (0.03, 100), options("LeakyReluOptions", alpha=0.2)),
    "hard_swish": (B.HARD_SWISH, (0.03, 30), None),
    "quantize": (B.QUANTIZE, (0.07, 100), None),  # uint8 to uint8: a requantization
}


def _feeds(data: bytes, rng) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data)
    return {d["name"]: rng.integers(0, 256, d["shape"]).astype(np.uint8) for d in interp.get_input_details()}


def _integer_ops(data: bytes) -> list[str]:
    program = offload.load(data)
    return sorted(
        op.op_type for op in program.functions["forward"].body.operations if op.domain == "offload.tflite"
    )


def _exact(data: bytes, tmp_path, seed: int) -> None:
    check(data, _feeds(data, np.random.default_rng(seed)), tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize(
    "depthwise, stride, padding, act",
    [(False, 1, 0, 1), (False, 2, 1, 3), (False, 1, 1, 0), (True, 1, 0, 3), (True, 2, 0, 1), (True, 1, 1, 0)],
)
def test_uint8_conv_is_litert_exactly(tmp_path, depthwise, stride, padding, act):
    rng = np.random.default_rng(10 + stride + 3 * padding + act)
    data = conv_model(rng, depthwise, stride, padding, act, cout=16 if depthwise else 12)
    assert _integer_ops(data) == ["Conv"]
    _exact(data, tmp_path, 1)


@pytest.mark.parametrize("act", [0, 1])
def test_uint8_fully_connected_is_litert_exactly(tmp_path, act):
    data = fc_model(np.random.default_rng(2 + act), act)
    assert _integer_ops(data) == ["FullyConnected"]
    _exact(data, tmp_path, 2)


@pytest.mark.parametrize(
    "name, act", [("add", 0), ("add", 1), ("add", 3), ("sub", 0), ("mul", 1), ("div", 0)]
)
def test_uint8_binary_operators_are_litert_exactly(tmp_path, name, act):
    data = binary_model(name, act)
    assert _integer_ops(data) == [name.capitalize()]
    feeds = _feeds(data, np.random.default_rng(3 + act))
    feeds["b"][feeds["b"] == 140] = 141  # LiteRT's DIV refuses a divisor at its zero point (a real 0)
    check(data, feeds, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize("axes, y_quant", [([1, 2], (0.05, 100)), ([1, 2], (0.013, 40)), ([2], (0.021, 128))])
def test_uint8_mean_is_litert_exactly(tmp_path, axes, y_quant):
    """Over the spatial axes (a global average pool), not the innermost one: LiteRT's mean over
    the channels rounds otherwise, on int8 as on uint8 (docs/tflite.md "Not yet")."""
    data = reduce_model(B.MEAN, axes, y_quant)
    assert _integer_ops(data) == ["Mean"]
    _exact(data, tmp_path, 9)


@pytest.mark.parametrize("half_pixel", [False, True])
def test_uint8_resize_bilinear_is_litert_exactly(tmp_path, half_pixel):
    data = resize_model(half_pixel)
    assert _integer_ops(data) == ["ResizeBilinear"]
    _exact(data, tmp_path, 10)


def test_uint8_sum_keeps_the_float_rule(tmp_path):
    """LiteRT's uint8 SUM rounds unlike its int8 one: no integer op, within a unit of LiteRT."""
    data = reduce_model(B.SUM, [1, 2], (0.5, 3))
    assert _integer_ops(data) == []
    check(data, _feeds(data, np.random.default_rng(11)), tmp_path, rtol=0, atol=1)


def test_mixed_uint8_and_int8_keep_the_float_rule(tmp_path):
    """A QUANTIZE from uint8 to int8 (legacy models' converted inputs) is no integer op."""
    ts = [T("x", [BATCH, 256], U8, quant=(0.045, 131)), T("y", [BATCH, 256], TT.INT8, quant=(0.05, 3))]
    data = build([Graph(ts, [Op(B.QUANTIZE, [0], [1])], [0], [1])])
    assert _integer_ops(data) == []
    check(data, {"x": np.tile(np.arange(256, dtype=np.uint8), (BATCH, 1))}, tmp_path, rtol=0, atol=1)


@pytest.mark.parametrize("padding, size, stride", [(0, 3, 2), (1, 2, 2), (0, 3, 1)])
def test_uint8_average_pool_is_litert_exactly(tmp_path, padding, size, stride):
    data = pool_model(padding, size, stride)
    assert _integer_ops(data) == ["AveragePool"]
    _exact(data, tmp_path, 4 + size)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_uint8_table_operators_are_litert_exactly(tmp_path, name):
    """Every one of the 256 inputs, in each row of the batch."""
    code, y_quant, opts = UNARY[name]
    data = unary_model(code, y_quant, opts)
    assert _integer_ops(data) == ["Lookup"]
    x = np.tile(np.arange(256, dtype=np.uint8), (BATCH, 1))
    check(data, {"x": x}, tmp_path, rtol=0, atol=0)


def chain_model(rng) -> bytes:
    """conv 3 x 3 (RELU6) → depthwise 3 x 3 (RELU) → add (the conv's output) → average pool
    (the whole map) → fully connected → softmax: a legacy quantized network's blocks."""
    c, size = 8, 8
    ts = [
        T("x", [BATCH, size, size, 3], U8, quant=(1 / 128, 128)),
        T("w1", [c, 3, 3, 3], U8, data=_weights(rng, (c, 3, 3, 3)), quant=(0.01, 127)),
        T("b1", [c], TT.INT32, data=_bias(rng, c), quant=(0.01 / 128, 0)),
        T("y1", [BATCH, size, size, c], U8, quant=(6 / 255, 0)),
        T("w2", [1, 3, 3, c], U8, data=_weights(rng, (1, 3, 3, c)), quant=(0.02, 140)),
        T("b2", [c], TT.INT32, data=_bias(rng, c), quant=(6 / 255 * 0.02, 0)),
        T("y2", [BATCH, size, size, c], U8, quant=(0.05, 0)),
        T("y3", [BATCH, size, size, c], U8, quant=(0.06, 0)),
        T("y4", [BATCH, 1, 1, c], U8, quant=(0.06, 0)),
        T("y4r", [BATCH, c], U8, quant=(0.06, 0)),
        T("w5", [5, c], U8, data=_weights(rng, (5, c)), quant=(0.02, 120)),
        T("b5", [5], TT.INT32, data=_bias(rng, 5), quant=(0.06 * 0.02, 0)),
        T("y5", [BATCH, 5], U8, quant=(0.1, 130)),
        T("y", [BATCH, 5], U8, quant=(1 / 256, 0)),
        T("shape", [2], TT.INT32, data=np.array([BATCH, c], np.int32)),
    ]
    same = dict(padding=0, stride_w=1, stride_h=1)
    ops = [
        Op(B.CONV_2D, [0, 1, 2], [3], options("Conv2DOptions", fused_activation_function=3, **same)),
        Op(
            B.DEPTHWISE_CONV_2D,
            [3, 4, 5],
            [6],
            options("DepthwiseConv2DOptions", depth_multiplier=1, fused_activation_function=1, **same),
        ),
        Op(B.ADD, [6, 3], [7], options("AddOptions")),
        Op(
            B.AVERAGE_POOL_2D,
            [7],
            [8],
            options(
                "Pool2DOptions", padding=1, stride_w=1, stride_h=1, filter_width=size, filter_height=size
            ),
        ),
        Op(B.RESHAPE, [8, 14], [9]),
        Op(B.FULLY_CONNECTED, [9, 10, 11], [12], options("FullyConnectedOptions")),
        Op(B.SOFTMAX, [12], [13], options("SoftmaxOptions", beta=1.0)),
    ]
    return build([Graph(ts, ops, [0], [13])])


def test_a_uint8_chain_is_litert_exactly(tmp_path):
    data = chain_model(np.random.default_rng(7))
    assert _integer_ops(data) == ["Add", "AveragePool", "Conv", "Conv", "FullyConnected"]
    for seed in (5, 6):
        _exact(data, tmp_path, seed)


@needs_opencl
def test_a_uint8_chain_runs_as_float_on_opencl(tmp_path):
    """GPU backends run quantized models as float, rounding only at the output: the softmax
    output within 8 steps of 1/256 of LiteRT's uint8 one, 85 % within one step (measured over
    800 outputs: at most 6 steps, 89 % within one)."""
    data = chain_model(np.random.default_rng(7))
    diffs = []
    for seed in (5, 6):
        feeds = _feeds(data, np.random.default_rng(seed))
        _, got = run_on_opencl(offload.load(data), feeds, tmp_path)
        assert got["y"].dtype == np.uint8
        diffs.append(np.abs(got["y"].astype(int) - litert(data, feeds)["y"].astype(int)))
    diffs = np.concatenate(diffs)
    assert diffs.max() <= 8 and (diffs <= 1).mean() >= 0.85, np.bincount(diffs.ravel())
