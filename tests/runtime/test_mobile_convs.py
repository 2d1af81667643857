"""The convolutions of mobile convnets (runtime/kernels/conv_recipe.py, ``_ConvRecipe``): depthwise, grouped,
strided, dilated and padded 2-D convs on odd sizes, through each of the plan's paths, against
onnxruntime: by a .pte method (a prepared Conv, bound to its arrays or called per run) and by
offload.evaluate (the kernel), which agree bit for bit."""

from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.conv import _ConvCall
from offload.runtime.steps import _BoundRun, _KernelPair, _PreparedStep

from .harness import depthwise_sums, plan_path
from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT

# (channels in, height, width, channels out, group, kernel, strides, pads, dilations, path)
CASES = [
    (32, 67, 71, 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "rows"),
    (24, 69, 71, 24, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "rows"),
    (16, 73, 70, 16, 16, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), "rows"),
    (8, 70, 67, 8, 8, (3, 3), (1, 2), (0, 1, 2, 1), (2, 1), "rows"),
    (12, 81, 79, 12, 12, (3, 5), (3, 3), (1, 2, 0, 1), (1, 2), "rows"),
    (32, 23, 19, 32, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "last"),
    (24, 29, 31, 24, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "last"),
    (16, 33, 30, 16, 16, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), "last"),
    (8, 30, 27, 8, 8, (3, 3), (1, 2), (0, 1, 2, 1), (2, 1), "last"),
    (12, 61, 59, 12, 12, (3, 5), (3, 3), (1, 2, 0, 1), (1, 2), "last"),
    (40, 7, 9, 40, 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "last"),
    (36, 13, 11, 36, 36, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), "last"),
    (20, 9, 8, 20, 20, (3, 3), (2, 1), (1, 0, 1, 2), (1, 2), "last"),
    (144, 27, 27, 144, 144, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "last"),
    # channels of a multiple of 256 bytes: channels-last with a cache line of zero channels more
    (128, 9, 11, 128, 128, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "last"),
    (192, 15, 13, 192, 192, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "last"),
    (24, 11, 13, 40, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "pointwise"),
    (24, 9, 7, 36, 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "pointwise"),
    (17, 1, 1, 9, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), "pointwise"),
    (3, 37, 35, 16, 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "columns"),
    (12, 15, 14, 18, 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "columns"),
    (6, 17, 16, 10, 2, (3, 2), (3, 2), (2, 0, 1, 1), (1, 2), "columns"),
    (8, 12, 12, 8, 1, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), "columns"),
    (8, 12, 13, 16, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "columns"),  # depth multiplier 2
]


def _conv_model(case, bias: bool, batch: int = 1, reshaped: bool = False) -> bytes:
    """x -> Neg -> Conv -> y, seeded weights: Neg's result is in its arena view, so that the Conv
    is bound. ``reshaped``: x -> Reshape to itself -> Conv, whose input is an array the method
    does not know in advance (a kernel's result): the Conv is not bound."""
    c, h, w, m, group, kernel, strides, pads, dilations, _ = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))  # the same seed on every run
    inits = [("w", rng.standard_normal((m, c // group, *kernel)).astype(np.float32))]
    inputs = ["r", "w"]
    if bias:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
        inputs.append("b")
    if reshaped:
        inits.append(("shape", np.array([batch, c, h, w], np.int64)))
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"])]
    else:
        nodes = [helper.make_node("Neg", ["x"], ["r"])]
    nodes.append(
        helper.make_node(
            "Conv",
            inputs,
            ["y"],
            group=group,
            kernel_shape=kernel,
            strides=strides,
            pads=pads,
            dilations=dilations,
        )
    )
    return model_bytes(nodes, [("x", F32, [batch, c, h, w])], [("y", F32, None)], inits, opset=17)


def _prepared_conv(method) -> _PreparedStep:
    (step,) = [s for s in method._steps if isinstance(s, _PreparedStep) and s.kernel.op_name == "onnx::Conv"]
    return step


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[-1]}-{c[0]}x{c[1]}x{c[2]}-g{c[4]}-k{c[5]}-s{c[6]}")
def test_conv_paths_match_onnxruntime(case, bias, conv_loops):
    data = _conv_model(case, bias)
    x = np.random.default_rng(1).standard_normal((1,) + case[:3]).astype(np.float32)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    step = _prepared_conv(method)
    assert isinstance(step.call, _ConvCall) and step.call.recipe.path == plan_path(case[-1], conv_loops)
    assert any(isinstance(s, _BoundRun) for s in method._fast_steps)  # the Conv is bound
    tol = dict(rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    for _ in range(2):  # the second run reuses the buffers whose borders the first left zero
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, **tol)
    np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], got)


@pytest.mark.parametrize("case", [c for c in CASES if c[-1] != "pointwise"][::2], ids=lambda c: c[-1])
def test_unbound_conv_and_batches(case, conv_loops):
    """A Conv after a kernel (not bound: its plan's calls made per run), on a batch of 2."""
    data = _conv_model(case, True, batch=2, reshaped=True)
    rng = np.random.default_rng(2)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert isinstance(_prepared_conv(method).call, _ConvCall)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = rng.standard_normal((2,) + case[:3]).astype(np.float32)
        expected = session.run(None, {"x": x})[0]
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_depthwise_float64_and_float16(dtype, conv_loops):
    """float64 runs by a plan too; float16 widens to float32 in the kernel, as before."""
    onnx_type = {np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}[dtype]
    for case in (CASES[0], CASES[5]):  # rows, last
        c, h, w, m, group, kernel, _, pads, _, _ = case
        rng = np.random.default_rng(3)
        weights = rng.standard_normal((m, 1, *kernel)).astype(dtype)
        data = model_bytes(
            [
                helper.make_node("Neg", ["x"], ["r"]),
                helper.make_node("Conv", ["r", "w"], ["y"], group=group, pads=pads),
            ],
            [("x", onnx_type, [1, c, h, w])],
            [("y", onnx_type, None)],
            [("w", weights)],
            opset=17,
        )
        x = rng.standard_normal((1, c, h, w)).astype(dtype)
        expected = depthwise_sums(-x, weights, pads=pads)
        got = offload.runtime.load(offload.save(offload.load(data))).method("forward").run({"x": x})["y"]
        assert got.dtype == dtype
        tol = 1e-12 if dtype == np.float64 else 2e-3
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


def test_mobile_activations_match_onnxruntime():
    """HardSwish, HardSigmoid, Clip (ReLU6) and GlobalAveragePool, as mobile nets chain them (a
    squeeze-excite block), run as prepared calls; the arena may give an op its input's memory."""
    rng = np.random.default_rng(4)
    c = 24
    inits = [
        ("lo", np.array(0, np.float32)),
        ("hi", np.array(6, np.float32)),
        ("w", (rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("HardSwish", ["n"], ["hs"]),
        helper.make_node("Clip", ["hs", "lo", "hi"], ["r6"]),
        helper.make_node("GlobalAveragePool", ["r6"], ["gap"]),
        helper.make_node("Conv", ["gap", "w"], ["sq"]),
        helper.make_node("HardSigmoid", ["sq"], ["gate"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["r6", "gate"], ["y"]),
    ]
    data = model_bytes(nodes, [("x", F32, [1, c, 13, 11])], [("y", F32, None)], inits, opset=17)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    prepared = set()
    for s in method._steps:
        if isinstance(s, _PreparedStep):
            k = s.kernel
            prepared |= {k.first.op_name, k.second.op_name} if isinstance(k, _KernelPair) else {k.op_name}
    for op in ("HardSwish", "Clip", "GlobalAveragePool", "Conv", "HardSigmoid", "Mul"):
        assert f"onnx::{op}" in prepared, op
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for scale in (1.0, 5.0):  # across HardSwish's and ReLU6's bends
        x = (rng.standard_normal((1, c, 13, 11)) * scale).astype(np.float32)
        expected = session.run(None, {"x": x})[0]
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], got)


@pytest.mark.parametrize(
    "kernel, strides, pads, dilations, ceil",
    [
        ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),
        ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 1),
        ((2, 3), (1, 2), (1, 0, 0, 2), (2, 1), 0),
        ((1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 0),
    ],
)
@pytest.mark.parametrize("reshaped", [False, True], ids=["bound", "unbound"])
def test_max_pool_matches_onnxruntime(kernel, strides, pads, dilations, ceil, reshaped):
    """MaxPool's kernel: its padding a buffer of the lowest value, filled once."""
    shape = [1, 6, 17, 14]
    pool = helper.make_node(
        "MaxPool",
        ["r"],
        ["y"],
        kernel_shape=kernel,
        strides=strides,
        pads=pads,
        dilations=dilations,
        ceil_mode=ceil,
    )
    inits = [("shape", np.array(shape, np.int64))]
    first = (
        helper.make_node("Reshape", ["x", "shape"], ["r"])
        if reshaped
        else helper.make_node("Neg", ["x"], ["r"])
    )
    data = model_bytes([first, pool], [("x", F32, shape)], [("y", F32, None)], inits, opset=17)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(2):  # all negative on the second run: the padding must not win
        x = (rng.standard_normal(shape) - 10 * _).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])
        np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], got)


@pytest.mark.parametrize(
    "kernel, strides, pads, ceil, include",
    [
        ((3, 3), (2, 2), (1, 1, 1, 1), 0, 0),
        ((3, 3), (2, 2), (1, 1, 1, 1), 0, 1),
        ((3, 2), (2, 1), (0, 1, 2, 0), 1, 0),
        ((2, 2), (2, 2), (0, 0, 0, 0), 1, 1),
    ],
)
def test_average_pool_matches_onnxruntime(kernel, strides, pads, ceil, include):
    """AveragePool's sums folded one axis after the other, divided by the window counts."""
    shape = [1, 5, 15, 13]
    pool = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=kernel,
        strides=strides,
        pads=pads,
        ceil_mode=ceil,
        count_include_pad=include,
    )
    data = model_bytes([pool], [("x", F32, shape)], [("y", F32, None)], opset=19)
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(method.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[15]], ids=["rows", "last", "last-padded"])
def test_depthwise_weights_computed_per_run(case):
    """Weights that the graph computes (here Neg of an input) change between runs: the plan's
    transposed copy of them is refreshed at every run, bound or not."""
    c, h, w, m, group, kernel, strides, pads, dilations, _ = case
    data = model_bytes(
        [
            helper.make_node("Neg", ["x"], ["r"]),
            helper.make_node("Neg", ["k"], ["wk"]),
            helper.make_node(
                "Conv", ["r", "wk"], ["y"], group=group, strides=strides, pads=pads, dilations=dilations
            ),
        ],
        [("x", F32, [1, c, h, w]), ("k", F32, [m, 1, *kernel])],
        [("y", F32, None)],
        opset=17,
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    for _ in range(3):
        k = rng.standard_normal((m, 1, *kernel)).astype(np.float32)
        expected = session.run(None, {"x": x, "k": k})[0]
        got = method.run({"x": x, "k": k})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
