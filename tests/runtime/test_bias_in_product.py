"""A conv recipe that sums its bias inside the BLAS product, a column of the weights times a row of
ones under the operand (runtime/kernels/conv_recipe.py, ``_ConvRecipe.bias_in_product``): the pointwise
path with more channels out than in, and the columns path, of one group; against onnxruntime,
and bit for bit between a .pte method and offload.evaluate (the kernel), with constant weights
and with weights and bias given at each run (copied into the combined matrix again)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.conv import _ConvCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}

# (channels in, height, width, channels out, kernel, strides, pads, path, bias in product)
CASES = [
    (16, 21, 19, 96, (1, 1), (1, 1), (0, 0, 0, 0), "pointwise", True),
    (24, 9, 7, 40, (1, 1), (1, 1), (0, 0, 0, 0), "pointwise", True),
    (1, 5, 3, 4, (1, 1), (1, 1), (0, 0, 0, 0), "pointwise", True),
    (40, 9, 7, 24, (1, 1), (1, 1), (0, 0, 0, 0), "pointwise", False),  # fewer out: an add after
    (3, 37, 35, 16, (3, 3), (2, 2), (1, 1, 1, 1), "columns", True),
    (3, 15, 14, 32, (3, 3), (1, 1), (1, 1, 1, 1), "columns", True),
    (6, 17, 16, 10, (3, 2), (3, 2), (2, 0, 1, 1), "columns", True),
]


def _model(case, dtype=np.float32, batch=1, weights_in=False) -> bytes:
    """x -> Neg -> Conv (bias) -> y; ``weights_in``: the weights and bias are graph inputs."""
    c, h, w, m, kernel, strides, pads, _, _ = case
    t = TYPES[dtype]
    inputs, inits = [("x", t, [batch, c, h, w])], []
    if weights_in:
        inputs += [("w", t, [m, c, *kernel]), ("b", t, [m])]
    else:
        rng = np.random.default_rng(sum(case[:4]))
        inits += [
            ("w", rng.standard_normal((m, c, *kernel)).astype(dtype)),
            ("b", rng.standard_normal(m).astype(dtype)),
        ]
    nodes = [
        helper.make_node("Neg", ["x"], ["r"]),
        helper.make_node("Conv", ["r", "w", "b"], ["y"], kernel_shape=kernel, strides=strides, pads=pads),
    ]
    return model_bytes(nodes, inputs, [("y", t, None)], inits, opset=17)


def _conv_step(method) -> _PreparedStep:
    (step,) = [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _ConvCall)]
    return step


def _direct(x, w, b, strides, pads):
    """The convolution by numpy's formulas, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - kh) // strides[0] + 1
    ow = (xp.shape[3] - kw) // strides[1] + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            tap = xp[
                :,
                :,
                i : i + strides[0] * (oh - 1) + 1 : strides[0],
                j : j + strides[1] * (ow - 1) + 1 : strides[1],
            ]
            y += np.einsum("mc,nchw->nmhw", w[:, :, i, j], tap)
    return y + b.astype(np.float64)[None, :, None, None]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[7]}-{c[0]}to{c[3]}-k{c[4]}-s{c[5]}")
def test_bias_in_product_matches_onnxruntime(case):
    data = _model(case, batch=2)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    plan = _conv_step(method).call.recipe
    assert plan.path == case[7] and plan.bias_in_product(True) == case[8]
    x = np.random.default_rng(1).standard_normal((2,) + case[:3]).astype(np.float32)
    expected = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):  # the second run: the row of ones the first left in the shared buffer
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    np.testing.assert_array_equal(offload.evaluate(offload.load(data), {"x": x})["y"], got)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=["pointwise", "columns"])
def test_weights_and_bias_given_at_each_run(case, dtype):
    """Weights that may change between runs are copied into the combined matrix at each run."""
    data = _model(case, dtype, weights_in=True)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert _conv_step(method).call.recipe.bias_in_product(True)
    c, h, w, m, kernel, strides, pads = case[:7]
    rng = np.random.default_rng(2)
    for _ in range(3):
        feeds = {
            "x": rng.standard_normal((1, c, h, w)).astype(dtype),
            "w": rng.standard_normal((m, c, *kernel)).astype(dtype),
            "b": rng.standard_normal(m).astype(dtype),
        }
        got = method.run(feeds)["y"]
        expected = _direct(-feeds["x"], feeds["w"], feeds["b"], strides, pads)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())
        np.testing.assert_array_equal(offload.evaluate(offload.load(data), feeds)["y"], got)
