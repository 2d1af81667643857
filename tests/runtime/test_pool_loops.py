"""2-D MaxPool and AveragePool by the compiled loop (runtime/kernels/pool_loops.py ``pool2d``,
chosen by pool._pool_calls for strided pools: ``_loop_pays``): the numpy calls' bits (NaN, -inf and signed
zeros included), values against onnxruntime and numpy in float64, the kernel's bits in a .pte
run, and an output that overlaps its input (the memory plan's SHRINKS_OVER) only where the loop
writes no input it has still to read."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import _util, pool
from offload.runtime.kernels.buffers import _run_calls, _thread_buffers
from offload.runtime.kernels.windows import _geometry

from .onnx_graphs import model_bytes

pytestmark = pytest.mark.skipif(_util.compiled_loops() is None, reason="numba is not installed")

GEOMETRIES = [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),  # the stem pool on even maps
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 3], dilations=[2, 2], pads=[1, 0, 0, 2]),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1], dilations=[2, 1]),
    dict(kernel_shape=[5, 4], strides=[2, 2], pads=[2, 1, 2, 1]),  # more than three taps a side
]
SHAPES = [(2, 3, 13, 12), (1, 2, 10, 11), (1, 2, 12, 14), (1, 2, 5, 4)]


def _calls(op, x, g, attrs, count_include_pad=0):
    if op == "MaxPool":
        ufunc, fill, divisor = np.maximum, pool._lowest(x.dtype), None
    else:
        ufunc, fill = np.add, 0
        divisor = pool._pool_divisor(g, x.shape, count_include_pad, "NOTSET", attrs.get("pads"), x.dtype)
    out = np.empty(x.shape[:2] + g.out, x.dtype)
    return out, pool._pool_calls(out, x, g, ufunc, fill, _thread_buffers(), divisor)


def _windows_in_float64(op, x, g, count_include_pad, pads):
    """Each window's max or mean straight from its definition, in float64 (with
    count_include_pad the explicit pads count, not what ceil_mode adds)."""
    end = (pads or [0, 0, 0, 0])[2:]
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left) = g.kernel, g.strides, g.dilations, g.begin
    want = np.empty((n, c) + g.out)
    for oy in range(g.out[0]):
        for ox in range(g.out[1]):
            ys = [oy * sh - top + i * dh for i in range(kh)]
            xs = [ox * sw - left + j * dw for j in range(kw)]
            inside = [(a, b) for a in ys for b in xs if 0 <= a < h and 0 <= b < w]
            values = np.stack([x[:, :, a, b].astype(np.float64) for a, b in inside], -1)
            if op == "MaxPool":
                want[:, :, oy, ox] = values.max(-1)
            else:
                pads_in = [
                    (a, b) for a in ys for b in xs if -top <= a < h + end[0] and -left <= b < w + end[1]
                ]
                want[:, :, oy, ox] = values.sum(-1) / (len(pads_in) if count_include_pad else len(inside))
    return want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("attrs", GEOMETRIES, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePool-include-pad"])
def test_the_compiled_pool_has_the_numpy_calls_bits(op, attrs, shape, dtype, monkeypatch):
    include = int(op.endswith("include-pad"))
    op = op.removesuffix("-include-pad")
    a = dict(attrs)
    g = _geometry(
        op,
        shape,
        a["kernel_shape"],
        "NOTSET",
        a.get("dilations"),
        a.get("pads"),
        a["strides"],
        a.get("ceil_mode", 0),
    )
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[rng.integers(0, x.size, 4)] = -0.0
    x.flat[rng.integers(0, x.size, 2)] = -np.inf
    x.flat[rng.integers(0, x.size, 2)] = np.nan
    got, calls = _calls(op, x, g, a, include)
    # the compiled loop, one call: a max pool, an average of more than 2 x 2 (pool._loop_pays)
    looped = op == "MaxPool" or g.kernel[0] * g.kernel[1] > 4
    assert ([c.func.__name__ for c in calls] == ["pool2d"]) is looped
    _run_calls(calls)
    monkeypatch.setattr(_util, "_LOOPS", False)  # as without numba: the numpy calls
    want, calls = _calls(op, x, g, a, include)
    assert "pool2d" not in [getattr(c.func, "__name__", "") for c in calls]
    _run_calls(calls)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # zeros of either sign: all -0.0 windows (the sign of zero sums depends on the fold's order)
    z = np.full(shape, -0.0, dtype)
    monkeypatch.setattr(_util, "_LOOPS", None)
    got, calls = _calls(op, z, g, a, include)
    _run_calls(calls)
    monkeypatch.setattr(_util, "_LOOPS", False)
    want, calls = _calls(op, z, g, a, include)
    _run_calls(calls)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    # the values without the specials, against the windows' definition in float64
    monkeypatch.setattr(_util, "_LOOPS", None)
    x = rng.standard_normal(shape).astype(dtype)
    want64 = _windows_in_float64(op, x, g, include, a.get("pads"))
    got, calls = _calls(op, x, g, a, include)
    _run_calls(calls)
    np.testing.assert_allclose(got, want64, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs", "shape"),
    [
        ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2]), (1, 32, 45, 60)),
        ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (1, 16, 25, 30)),
        (
            "AveragePool",
            dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
            (2, 8, 17, 16),
        ),
    ],
)
def test_a_strided_pool_runs_the_compiled_loop_and_matches_onnxruntime(op, attrs, shape):
    data = model_bytes(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r"], ["y"], **attrs)],
        [("x", TensorProto.FLOAT, list(shape))],
        [("y", TensorProto.FLOAT, None)],
        opset=19,
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = [s for s in method._steps if "Pool" in s.info().name]
    x0 = np.zeros(shape, np.float32)
    assert [
        c.func.__name__
        for c in step.call.calls(np.empty_like(method.run({"x": x0})["y"]), x0, _thread_buffers())
    ] == ["pool2d"]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got, offload.evaluate(offload.load(data), {"x": x})["y"])


@pytest.mark.parametrize(
    ("attrs", "shift", "loop"),
    [
        (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 0, True),  # out where x starts
        (dict(kernel_shape=[2, 2], strides=[2, 2]), 0, True),
        (
            dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
            40,
            False,
        ),  # would overwrite rows still read
    ],
)
def test_an_output_over_its_input_takes_the_loop_only_where_it_writes_what_was_read(attrs, shift, loop):
    shape = (1, 3, 12, 14)
    g = _geometry(
        "MaxPool", shape, attrs["kernel_shape"], "NOTSET", None, attrs.get("pads"), attrs["strides"], 0
    )
    x = np.random.default_rng(10).standard_normal(shape).astype(np.float32)
    want = np.empty((1, 3) + g.out, np.float32)
    _run_calls(pool._pool_calls(want, x, g, np.maximum, -np.inf, _thread_buffers()))
    memory = np.zeros(x.size + shift + want.size, np.float32)
    xs = memory[: x.size].reshape(shape)
    xs[...] = x
    out = memory[shift : shift + want.size].reshape(want.shape)
    assert pool._loop_may_write(out, xs, g) is loop
    calls = pool._pool_calls(out, xs, g, np.maximum, -np.inf, _thread_buffers())
    assert (calls[0].func.__name__ == "pool2d") is loop
    _run_calls(calls)
    np.testing.assert_array_equal(out, want)
