"""Two CPU kernel shortcuts a spectrogram front end takes (frontends/tflite_fft.py): the one-sided
DFT of a real signal through numpy's real transform, and ReduceL2 over a last axis of two (a
complex magnitude) as its one addition. Each against onnxruntime, and ReduceL2 bit for bit
against numpy's reduction of the same squares, the path it replaces."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import reduction
from tests.runtime.onnx_graphs import model_bytes

RNG = np.random.default_rng(20261128)
F = TensorProto.FLOAT


def _ort(data: bytes, feeds: dict) -> list:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("n, length", [(16, 16), (20, 16), (12, 16), (400, 512), (9, 7)])
def test_a_real_onesided_dft_takes_the_real_transform(n, length, monkeypatch):
    """Lengths equal, cropping, padding, a non-power of two; the DFT on axis 1 of [3, n, 1]."""
    data = model_bytes(
        [helper.make_node("DFT", ["x", "length", "axis"], ["y"], onesided=1)],
        [("x", F, [3, n, 1])],
        [("y", F, None)],
        [("length", np.array(length, np.int64)), ("axis", np.array(1, np.int64))],
        opset=20,
    )
    x = RNG.standard_normal((3, n, 1)).astype(np.float32)
    (want,) = _ort(data, {"x": x})
    calls = []
    rfft = np.fft.rfft
    monkeypatch.setattr(np.fft, "rfft", lambda *a, **k: calls.append(a[1:]) or rfft(*a, **k))
    got = offload.evaluate(offload.load(data), {"x": x})["y"]
    assert calls == [(length,)]
    assert got.shape == want.shape == (3, length // 2 + 1, 2) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-7 * np.sqrt(length) * np.abs(want).max())


@np.errstate(over="ignore")  # 3e38 squared: inf on both paths
def test_reduce_l2_over_a_pair_axis_is_the_reduction_bit_for_bit():
    x = (RNG.standard_normal((5, 7, 2)) * 10.0 ** RNG.integers(-20, 20, (5, 7, 2))).astype(np.float32)
    x[0, :, 0] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38]
    x[0, :, 1] = [-0.0, -0.0, 1.0, np.nan, 2.0, 1e-45, 3e38]
    for keepdims in (0, 1):
        data = model_bytes(
            [helper.make_node("ReduceL2", ["x", "axes"], ["y"], keepdims=keepdims)],
            [("x", F, [5, 7, 2])],
            [("y", F, None)],
            [("axes", np.array([-1], np.int64))],
        )
        got = offload.evaluate(offload.load(data), {"x": x})["y"]
        reduced = np.sqrt(np.add.reduce(x * x, axis=-1, keepdims=bool(keepdims), dtype=np.float32))
        assert got.shape == reduced.shape and got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), reduced.view(np.uint32))
        (want,) = _ort(data, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # the shortcut is the one taken: its arithmetic in place of numpy's reduction
    assert np.array_equal(reduction._l2(x, (2,)), np.sqrt(x[..., :1] ** 2 + x[..., 1:] ** 2), equal_nan=True)
