"""The `opencl` backend, really run (PoCL in CI): each op against offload.evaluate, end to end."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload

from .opencl_support import check, model, needs_opencl, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(0)


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs"]


@pytest.mark.parametrize("op", [*UNARY, "Log", "Sqrt"])
def test_unary(op, tmp_path):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32) * 3
    if op in ("Log", "Sqrt"):
        x = np.abs(x) + 0.1
    p = model([helper.make_node(op, ["x"], ["y"])], [("x", [3, 4, 5])], ["y"])
    check(p, {"x": x}, tmp_path)


def test_leaky_relu_and_clip(tmp_path):
    x = RNG.standard_normal((2, 7)).astype(np.float32) * 3
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.3),
        helper.make_node("Clip", ["a", "lo", "hi"], ["b"]),
        helper.make_node("Clip", ["b", "", "hi2"], ["y"]),
    ]
    init = [("lo", np.float32(-0.5)), ("hi", np.float32(2.0)), ("hi2", np.float32(1.5))]
    check(model(nodes, [("x", [2, 7])], ["y"], init), {"x": x}, tmp_path)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (3, 4)),
        ((2, 3, 4), (4,)),
        ((2, 1, 4), (3, 1)),
        ((), (2, 3)),
        ((1, 2, 1, 1, 3, 1), (2, 1, 4, 1, 5)),
    ],
)
def test_binary_broadcasting(op, sa, sb, tmp_path):
    a = RNG.standard_normal(sa).astype(np.float32)
    b = RNG.standard_normal(sb).astype(np.float32)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    p = model([helper.make_node(op, ["a", "b"], ["y"])], [("a", list(sa)), ("b", list(sb))], ["y"])
    check(p, {"a": a, "b": b}, tmp_path)


def _ints(shape):
    """Small multiples of 1/2: sums of their products are exact in float32, whatever the order."""
    return (RNG.integers(-4, 5, shape) / 2).astype(np.float32)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((5, 7), (7, 3)),
        ((17, 33), (33, 19)),
        ((1, 40), (40, 1)),
        ((2, 3, 18, 20), (20, 21)),
        ((4, 1, 5, 6), (3, 6, 2)),
    ],
)
def test_matmul(sa, sb, tmp_path):
    p = model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", list(sa)), ("b", list(sb))], ["y"])
    check(p, {"a": _ints(sa), "b": _ints(sb)}, tmp_path)


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("cshape", [None, (19,), (17, 1), (17, 19), ()])
def test_gemm(ta, tb, cshape, tmp_path):
    M, K, N = 17, 23, 19
    a = _ints((K, M) if ta else (M, K))
    b = _ints((N, K) if tb else (K, N))
    inputs = ["a", "b"] + (["c"] if cshape is not None else [])
    init = [("c", _ints(cshape))] if cshape is not None else []
    node = helper.make_node("Gemm", inputs, ["y"], transA=ta, transB=tb, alpha=0.5, beta=2.0)
    p = model([node], [("a", list(a.shape)), ("b", list(b.shape))], ["y"], init)
    check(p, {"a": a, "b": b}, tmp_path)


def test_small_model_runs_on_the_backend(tmp_path):
    w1, b1, w2 = _ints((8, 16)), _ints((16,)), _ints((16, 4))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Gemm", ["r", "w2"], ["z"], alpha=0.25),
        helper.make_node("Sigmoid", ["z"], ["y"]),
    ]
    p = model(nodes, [("x", [3, 8])], ["y"], [("w1", w1), ("b1", b1), ("w2", w2)])
    x = _ints((3, 8))
    check(p, {"x": x}, tmp_path)
    got = run_on_opencl(p, {"x": x}, tmp_path)[1]
    np.testing.assert_allclose(got["y"], offload.evaluate(p, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_build_failure_carries_the_build_log():
    from offload.delegates.opencl.runtime import OpenCLBuildError, build, device_for

    with pytest.raises(OpenCLBuildError) as e:
        build(device_for(None), "__kernel void k(__global float* x) { x[0] = undefined_name; }")
    assert "undefined_name" in str(e.value)


def test_device_spec_picks_by_name_and_index():
    from offload.delegates.opencl.runtime import device_for

    d = device_for("0:0")
    assert device_for("0") is d
    assert device_for(d.device.name[:6]) is d
    with pytest.raises(offload.errors.OffloadError, match="no device matches"):
        device_for("no-such-device-xyz")
