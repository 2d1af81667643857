"""Prepared calls of TFLite's int8 Conv, FullyConnected and Lookup (runtime/kernels/
tflite_int8_prepared.py) and of integer Transposes: against an integer reference in numpy (an
exact int64 convolution, then XNNPACK's fp32 requantization as docs/tflite.md states it), bit
for bit the kernels' results, and converter-made int8 models through a .pte against LiteRT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime import kernels
from offload.runtime.kernels import tflite_int8
from offload.runtime.kernels.tflite_int8_prepared import (
    PRODUCT_LOOP_MACS,
    _Int8ConvCall,
    _Int8FullyConnectedCall,
    _LookupCall,
)
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

HERE = Path(__file__).parent.parent / "frontends" / "tflite"
RNG = np.random.default_rng(20261127)


def _requantized(acc: np.ndarray, scale: np.ndarray, zero: int, lo: int, hi: int) -> np.ndarray:
    """XNNPACK's fp32 requantization: the exact sum in float32, times the float32 scale, rounded
    to nearest even, plus the zero point, clamped."""
    y = np.rint(acc.astype(np.float32) * scale.astype(np.float32))
    return np.clip(y + np.float32(zero), lo, hi).astype(np.int8)


def _reference_conv(x, w, b, attrs) -> np.ndarray:
    """int64 convolution of x - zero point (the padding reads the zero point) by explicit windows."""
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (t, left, bottom, right) = attrs["strides"], attrs["dilations"], attrs["pads"]
    group = attrs["group"]
    xs = np.pad(x.astype(np.int64) - attrs["x_zero_point"], ((0, 0), (0, 0), (t, bottom), (left, right)))
    oh = (h + t + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for o in range(m):
        g = o // mg
        for i, j in np.ndindex(kh, kw):
            window = xs[
                :,
                g * cg : (g + 1) * cg,
                i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                j * dw : j * dw + sw * (ow - 1) + 1 : sw,
            ]
            acc[:, o] += np.einsum("nchw,c->nhw", window, w[o, :, i, j].astype(np.int64))
    if b is not None:
        acc += b.astype(np.int64).reshape(1, m, 1, 1)
    scale = (
        np.float32(attrs["x_scale"])
        * np.asarray(attrs["w_scales"], np.float32)
        / np.float32(attrs["y_scale"])
    )
    return _requantized(acc, scale.reshape(-1, 1, 1), attrs["y_zero_point"], attrs["y_min"], attrs["y_max"])


CONVS = {
    # (x shape, w shape, group, strides, dilations, pads)
    "streaming 5x1 stride 3": ((1, 40, 5, 1), (32, 40, 5, 1), 1, [3, 1], [1, 1], [0, 0, 0, 0]),
    "depthwise 9x1": ((1, 64, 9, 1), (64, 1, 9, 1), 64, [1, 1], [1, 1], [0, 0, 0, 0]),
    "pointwise": ((1, 32, 1, 1), (64, 32, 1, 1), 1, [1, 1], [1, 1], [0, 0, 0, 0]),
    "3x3 same stride 2": ((2, 6, 9, 8), (10, 6, 3, 3), 1, [2, 2], [1, 1], [0, 0, 1, 1]),
    "depthwise 3x3 dilated padded": ((1, 8, 12, 12), (8, 1, 3, 3), 8, [1, 1], [2, 2], [2, 1, 2, 1]),
    "grouped": ((1, 8, 6, 6), (12, 4, 3, 3), 2, [1, 1], [1, 1], [1, 1, 1, 1]),
    "pointwise on a large map": ((1, 16, 20, 20), (24, 16, 1, 1), 1, [1, 1], [1, 1], [0, 0, 0, 0]),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
@pytest.mark.parametrize("case", list(CONVS))
def test_prepared_int8_conv_is_the_integer_reference(case, per_channel, bias, conv_loops):
    x_shape, w_shape, group, strides, dilations, pads = CONVS[case]
    m = w_shape[0]
    x = RNG.integers(-128, 128, x_shape).astype(np.int8)
    w = RNG.integers(-127, 128, w_shape).astype(np.int8)
    w.flags.writeable = False  # a constant, as a .pte maps it
    b = RNG.integers(-4000, 4000, m).astype(np.int32) if bias else None
    attrs = dict(
        auto_pad="NOTSET", dilations=dilations, group=group, kernel_shape=list(w_shape[2:]), pads=pads,
        strides=strides, x_scale=0.0517, x_zero_point=-3,
        w_scales=list(RNG.uniform(0.002, 0.01, m if per_channel else 1)), y_scale=0.173,
        y_zero_point=5, y_min=-128, y_max=127,
    )  # fmt: skip
    want = _reference_conv(x, w, b, attrs)
    assert len(np.unique(want)) > 10  # neither saturated nor constant
    args = [x, w] if b is None else [x, w, b]
    specs = [(a.dtype, a.shape) for a in args]
    call = kernels.find_prepared("offload.tflite", "Conv")(attrs, specs, (np.dtype(np.int8), want.shape))
    assert type(call) is _Int8ConvCall
    out = np.zeros(want.shape, np.int8)
    call(out, *args)
    np.testing.assert_array_equal(out, want)
    bound_out = np.zeros(want.shape, np.int8)
    x_view = x.copy()
    run = kernels.bind(call, bound_out, [x_view, *args[1:]])
    # On the compiled path a depthwise conv is one call (loops.int8_depthwise, after the copy of
    # a bias the graph may change: writeable here), and a conv whose one window is its whole
    # input one product (loops.int8_product); the others are neither.
    names = [getattr(c.func, "__name__", "") for c in run.args[0]]
    compiled = conv_loops == "compiled"
    depthwise = group == x_shape[1] == w_shape[0]
    assert (names == ["copyto"] * (b is not None) + ["int8_depthwise"]) == (depthwise and compiled), names
    whole = group == 1 and x_shape[2:] == w_shape[2:] and not any(pads) and dilations == [1, 1]
    assert (names == ["int8_product"]) == (whole and compiled), names
    for k in range(2):  # the second run with new input values in the same array
        run()
        np.testing.assert_array_equal(bound_out, want if k == 0 else _reference_conv(x_view, w, b, attrs))
        x_view[...] = RNG.integers(-128, 128, x_shape)
    np.testing.assert_array_equal(tflite_int8.conv(None, x, *args[1:], **attrs), want)  # the kernel's


def test_weights_the_graph_computes_are_read_at_every_call():
    x = RNG.integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    w = RNG.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    b = RNG.integers(-500, 500, 6).astype(np.int32)
    attrs = dict(
        auto_pad="NOTSET", dilations=[1, 1], group=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1],
        x_scale=0.05, x_zero_point=0, w_scales=[0.004], y_scale=0.2, y_zero_point=0, y_min=-128, y_max=127,
    )  # fmt: skip
    call = kernels.find_prepared("offload.tflite", "Conv")(
        attrs, [(a.dtype, a.shape) for a in (x, w, b)], (np.dtype(np.int8), (1, 6, 5, 5))
    )
    out = np.zeros((1, 6, 5, 5), np.int8)
    run = kernels.bind(call, out, [x, w, b])
    run()
    np.testing.assert_array_equal(out, _reference_conv(x, w, b, attrs))
    w[...], b[...] = -w, b // 2  # writeable: a value the graph computed, new at the next run
    run()
    np.testing.assert_array_equal(out, _reference_conv(x, w, b, attrs))


@pytest.mark.parametrize("x_shape", [(1, 320), (3, 2, 48), (3, 800)])
def test_prepared_int8_fully_connected_is_the_integer_reference(x_shape, conv_loops):
    """Small products (up to PRODUCT_LOOP_MACS) are one loops.int8_product call on the compiled
    path, larger ones (3 x 800 x 7) the BLAS product's calls; both read weights and bias the
    graph computes (writeable) at each call."""
    k, m = x_shape[-1], 7
    x = RNG.integers(-128, 128, x_shape).astype(np.int8)
    w = RNG.integers(-127, 128, (m, k)).astype(np.int8)
    b = RNG.integers(-3000, 3000, m).astype(np.int32)
    attrs = dict(
        x_scale=0.019, x_zero_point=-128, w_scales=list(RNG.uniform(0.003, 0.005, m)), y_scale=1.9,
        y_zero_point=24, y_min=-128, y_max=127,
    )  # fmt: skip
    acc = (x.astype(np.int64) + 128) @ w.astype(np.int64).T + b
    scale = np.float32(0.019) * np.asarray(attrs["w_scales"], np.float32) / np.float32(1.9)
    want = _requantized(acc, scale, 24, -128, 127)
    assert len(np.unique(want)) > 5
    call = kernels.find_prepared("offload.tflite", "FullyConnected")(
        attrs, [(a.dtype, a.shape) for a in (x, w, b)], (np.dtype(np.int8), want.shape)
    )
    assert type(call) is _Int8FullyConnectedCall
    out = np.zeros(want.shape, np.int8)
    call(out, x, w, b)
    np.testing.assert_array_equal(out, want)
    out[...] = 0
    run = kernels.bind(call, out, [x, w, b])
    run()
    np.testing.assert_array_equal(out, want)
    names = [getattr(c.func, "__name__", "") for c in run.args[0]]
    small = np.prod(x_shape) * m <= PRODUCT_LOOP_MACS
    assert (names == ["int8_product"]) == (small and conv_loops == "compiled"), names
    w[...], b[...] = -w, b // 2
    run()
    acc = (x.astype(np.int64) + 128) @ w.astype(np.int64).T + b
    np.testing.assert_array_equal(out, _requantized(acc, scale, 24, -128, 127))


def test_prepared_lookup_reads_the_table_at_x_plus_128():
    table = RNG.integers(-128, 128, 256).astype(np.int8)
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    call = kernels.find_prepared("offload.tflite", "Lookup")(
        {}, [(x.dtype, x.shape), (table.dtype, table.shape)], (np.dtype(np.int8), x.shape)
    )
    assert type(call) is _LookupCall
    out = np.zeros(x.shape, np.int8)
    kernels.bind(call, out, [x, table])()
    np.testing.assert_array_equal(out, table[x.astype(np.int64) + 128])
    assert (
        kernels.find_prepared("offload.tflite", "Lookup")(
            {}, [(x.dtype, x.shape), (table.dtype, (10,))], (np.dtype(np.int8), x.shape)
        )
        is None
    )  # a table of another size: the kernel's error


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.INT64, TensorProto.BOOL])
def test_integer_transposes_are_prepared_copies(dtype):
    data = model_bytes(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2])],
        [("x", dtype, [2, 5, 3, 4])],
        [("t", dtype, None)],
        [],
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::Transpose"]
    assert type(step) is _PreparedStep
    x = RNG.integers(-100, 100, (2, 5, 3, 4)).astype(np.int8 if dtype == TensorProto.INT8 else np.int64)
    x = x > 0 if dtype == TensorProto.BOOL else x
    for _ in range(2):
        np.testing.assert_array_equal(method.run({"x": x})["t"], np.transpose(x, (0, 3, 1, 2)))


@pytest.mark.parametrize("name", ["cnn_int8", "mobile_int8"])
def test_int8_models_through_a_pte_take_the_prepared_calls_and_match_litert(name):
    Interpreter = pytest.importorskip(
        "ai_edge_litert.interpreter", reason="LiteRT is the reference"
    ).Interpreter
    program = offload.load(HERE / f"{name}.tflite")
    method = offload.runtime.load(offload.save(program)).method("forward")
    interp = Interpreter(model_path=str(HERE / f"{name}.tflite"))
    interp.allocate_tensors()
    (port,) = interp.get_input_details()
    scale, zero = port["quantization"]
    worst = 0
    for _ in range(10):
        x = np.clip(np.round(RNG.standard_normal(port["shape"]) / scale) + zero, -128, 127).astype(np.int8)
        want = offload.evaluate(program, {port["name"]: x})
        interp.set_tensor(port["index"], x)
        interp.invoke()
        for _ in range(2):  # the first run binds the calls; the second runs them again
            got = method.run({port["name"]: x})
            for k, w in want.items():
                np.testing.assert_array_equal(got[k], w)  # the kernels' bits
        for d in interp.get_output_details():
            worst = max(
                worst, int(np.abs(got[d["name"]].astype(np.int64) - interp.get_tensor(d["index"])).max())
            )
    # a symbolic batch: the shape specialization for batch 1 holds the prepared calls
    steps = [s for entry in method._specializations.entries.values() for s in getattr(entry, "steps", [])]
    calls = {type(s.call) for s in [*method._steps, *steps] if isinstance(s, _PreparedStep)}
    assert {_Int8ConvCall, _Int8FullyConnectedCall} <= calls
    assert worst <= 1  # LiteRT's XNNPACK and builtin paths round a few values one unit apart


def test_a_scale_that_is_not_finite_takes_the_numpy_calls_with_their_bits():
    # a subnormal output scale makes the ratio inf: 0 · inf is NaN, whose int8 is numpy's cast
    x = RNG.integers(-128, 128, (1, 3)).astype(np.int8)
    w = np.array([[1, 0, -1], [0, 0, 0]], np.int8)
    attrs = dict(
        x_scale=0.5, x_zero_point=0, w_scales=[1.0], y_scale=1e-45, y_zero_point=0, y_min=-128, y_max=127
    )
    call = kernels.find_prepared("offload.tflite", "FullyConnected")(
        attrs, [(x.dtype, x.shape), (w.dtype, w.shape)], (np.dtype(np.int8), (1, 2))
    )
    out = np.zeros((1, 2), np.int8)
    with np.errstate(all="ignore"):
        kernels.bind(call, out, [x, w])()
        np.testing.assert_array_equal(out, tflite_int8.fully_connected(None, x, w, **attrs))


def test_a_one_row_product_may_write_over_its_input(conv_loops):
    """A FullyConnected of one row whose output lies over its input (an arena place the input's
    last read left free): loops.int8_product reads the row before it writes, so it is still the
    one compiled call, and its result the integer reference's."""
    k, m = 48, 16
    buffer = np.zeros(k, np.int8)
    x, out = buffer.reshape(1, k), buffer[:m].reshape(1, m)
    x[...] = RNG.integers(-128, 128, (1, k))
    w = RNG.integers(-127, 128, (m, k)).astype(np.int8)
    w.flags.writeable = False
    attrs = dict(
        x_scale=0.02, x_zero_point=-128, w_scales=[0.004], y_scale=1.3, y_zero_point=3, y_min=-128, y_max=127
    )
    scale = np.float32(0.02) * np.float32(0.004) / np.float32(1.3)
    want = _requantized((x.astype(np.int64) + 128) @ w.astype(np.int64).T, np.full(m, scale), 3, -128, 127)
    call = kernels.find_prepared("offload.tflite", "FullyConnected")(
        attrs, [(x.dtype, x.shape), (w.dtype, w.shape)], (np.dtype(np.int8), (1, m))
    )
    run = kernels.bind(call, out, [x, w])
    names = [getattr(c.func, "__name__", "") for c in run.args[0]]
    assert (names == ["int8_product"]) == (conv_loops == "compiled"), names
    run()
    np.testing.assert_array_equal(out, want)


def test_the_largest_one_call_product_of_extreme_values_is_exact(conv_loops):
    """loops.int8_product sums in int32: at the largest K it takes (PRODUCT_LOOP_MACS, one row,
    one output) and every product at its largest, |(x - zero) · w| = 255 · 128, the sum is still
    the integer reference's."""
    k = PRODUCT_LOOP_MACS
    x = np.full((1, k), -128, np.int8)
    w = np.full((1, k), -128, np.int8)
    w.flags.writeable = False
    attrs = dict(
        x_scale=1.0, x_zero_point=127, w_scales=[1.0], y_scale=2.0**26, y_zero_point=0, y_min=-128, y_max=127
    )
    acc = (x.astype(np.int64) - 127) @ w.astype(np.int64).T  # 16384 · 255 · 128 = 534,773,760
    want = _requantized(acc, np.full(1, np.float32(1) / np.float32(2.0**26)), 0, -128, 127)
    assert want[0, 0] == 8  # neither saturated nor zero
    call = kernels.find_prepared("offload.tflite", "FullyConnected")(
        attrs, [(x.dtype, x.shape), (w.dtype, w.shape)], (np.dtype(np.int8), (1, 1))
    )
    out = np.zeros((1, 1), np.int8)
    run = kernels.bind(call, out, [x, w])
    names = [getattr(c.func, "__name__", "") for c in run.args[0]]
    assert (names == ["int8_product"]) == (conv_loops == "compiled"), names
    run()
    np.testing.assert_array_equal(out, want)
