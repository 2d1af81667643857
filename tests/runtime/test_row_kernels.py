"""The shortcuts of the kernels a decoder runs on its step's row at every trip (runtime/kernels):
Tile that repeats only axes of length 1, Expand to the input's own shape, OneHot along the last
axis. Each is data movement: the results equal onnxruntime's exactly, and the general cases
beside them still do."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload

from .onnx_graphs import model_bytes

F32, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32


def _same_as_onnxruntime(node, inputs: dict, kinds: dict) -> None:
    data = model_bytes(
        [node],
        [(k, kinds[k], list(v.shape)) for k, v in inputs.items()],
        [("y", kinds["y"], None)],
    )
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    program = offload.load(data)
    for got in (
        offload.runtime.load(offload.save(program)).run(inputs)["y"],
        offload.evaluate(program, inputs)["y"],
    ):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "shape,reps",
    [((1, 1, 1), (1, 1, 30)), ((2, 1, 3), (1, 4, 1)), ((1, 3), (5, 1)), ((2, 3), (2, 2)), ((2, 1), (0, 3))],
)
def test_tile(shape, reps):
    x = np.arange(np.prod(shape), dtype=np.int64).reshape(shape) - 2
    _same_as_onnxruntime(
        helper.make_node("Tile", ["x", "r"], ["y"]),
        {"x": x, "r": np.array(reps, np.int64)},
        {"x": I64, "r": I64, "y": I64},
    )


@pytest.mark.parametrize("target", [(1, 1, 30), (4, 1, 30), (1,), (2, 3, 1, 30)])
def test_expand(target):
    x = np.random.default_rng(0).standard_normal((1, 1, 30)).astype(np.float32)
    _same_as_onnxruntime(
        helper.make_node("Expand", ["x", "s"], ["y"]),
        {"x": x, "s": np.array(target, np.int64)},
        {"x": F32, "s": I64, "y": F32},
    )


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = np.array([[3, -1], [29, 40]], np.int64)  # -1 is the last class; 40 matches none
    _same_as_onnxruntime(
        helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis),
        {"i": indices, "d": np.array([30], np.int32), "v": np.array([0.5, 2.0], np.float32)},
        {"i": I64, "d": I32, "v": F32, "y": F32},
    )
