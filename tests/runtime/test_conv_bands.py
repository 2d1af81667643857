"""The columns path by bands of output rows (runtime/kernels/conv_recipe.py, ``_ConvRecipe.banded``):
a one-group conv with few output channels and a large column matrix makes and multiplies its
columns a band at a time, the epilogue applied to each band. Against onnxruntime, and bit for bit
against offload.evaluate (whose kernel runs the same recipe); the band sizes are made small here
so that small maps take several bands, the last one short."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import _util, conv_recipe

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT

# (batch, channels in, height, width, channels out, kernel, strides, pads, dilations, bias)
CASES = [
    (1, 3, 37, 29, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),  # bands of 2 rows, the last 1
    (2, 5, 31, 23, 8, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), True),  # two images, uneven pads
    (1, 1, 45, 17, 32, (3, 3), (1, 1), (2, 1, 2, 1), (2, 1), False),  # dilated down, no bias
    (1, 8, 21, 20, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),  # out as large as x: may share it
]


@pytest.fixture
def small_bands(monkeypatch):
    """Bands from column matrices of 16 KiB, about 8 KiB each, where numba compiles im2col."""
    if _util.compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0): the bands need loops.im2col")
    monkeypatch.setattr(conv_recipe, "_BAND_FROM", 16 << 10)
    monkeypatch.setattr(conv_recipe, "_BAND_BYTES", 8 << 10)
    conv_recipe._recipe.cache_clear()
    yield
    conv_recipe._recipe.cache_clear()


def _model(case) -> bytes:
    n, c, h, w, m, kernel, strides, pads, dilations, bias = case
    rng = np.random.default_rng(c * h + m)
    inits = [("w", (rng.standard_normal((m, c, *kernel)) * 0.5).astype(np.float32))]
    if bias:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
    conv = dict(kernel_shape=kernel, strides=strides, pads=pads, dilations=dilations)
    nodes = [
        helper.make_node("Neg", ["x"], ["r"]),
        helper.make_node("Conv", ["r", "w"] + (["b"] if bias else []), ["c"], **conv),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    return model_bytes(nodes, [("x", F32, [n, c, h, w])], [("y", F32, None)], inits, opset=17)


@pytest.mark.parametrize("case", CASES)
def test_a_banded_conv_matches_onnxruntime_and_the_kernel(case, small_bands, monkeypatch):
    banded = []
    real = conv_recipe._ConvRecipe.banded

    def spy(self, *args):
        banded.append(self.band)
        return real(self, *args)

    monkeypatch.setattr(conv_recipe._ConvRecipe, "banded", spy)
    data = _model(case)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal(case[:4]).astype(np.float32)
    (want,) = session.run(None, {"x": x})
    for _ in range(2):  # the first run makes the calls; the second runs them again
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])
    oh = want.shape[2]
    assert banded and all(1 <= b < oh for b in banded), (banded, oh)


def test_few_output_channels_and_a_large_column_matrix_choose_bands():
    """The default thresholds: 16 output channels over a 9.5 MB column matrix take bands of
    about 1 MB; 64 output channels, or a small matrix, take the whole matrix."""
    g = conv_recipe._geometry("Conv", (1, 16, 128, 128), (3, 3), "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1])
    recipe = conv_recipe._ConvRecipe((1, 16, 128, 128), (16, 16, 3, 3), np.float32, g, 1)
    assert recipe.path == "columns" and recipe.band == (1 << 20) // (145 * 128 * 4)
    wide = conv_recipe._ConvRecipe((1, 16, 128, 128), (64, 16, 3, 3), np.float32, g, 1)
    assert wide.band is None
    g = conv_recipe._geometry("Conv", (1, 16, 32, 32), (3, 3), "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1])
    assert conv_recipe._ConvRecipe((1, 16, 32, 32), (16, 16, 3, 3), np.float32, g, 1).band is None
