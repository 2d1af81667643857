"""The CPU LRN kernel (runtime/kernels/normalization.py): odd windows on 4-D inputs against
onnxruntime, and even windows and other ranks, which onnxruntime refuses, against ONNX's
definition in float64 (tests/reference.py lrn_float64). A sum of ``size`` squares, then a
power: within sum_tolerance of size + 4 terms."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from tests.reference import assert_close, lrn_float64, onnxruntime_outputs, sum_tolerance


def _model(rank: int, **attrs) -> bytes:
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "lrn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * rank)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def _x(shape) -> np.ndarray:
    return (np.random.default_rng(13).standard_normal(shape) * 3).astype(np.float32)


@pytest.mark.parametrize(
    "shape, attrs",
    [((1, 5, 4, 4), {"size": 3}), ((2, 8, 3, 5), {"size": 5, "alpha": 1e-3, "beta": 0.5, "bias": 2.0})],
)
def test_lrn_matches_onnxruntime(shape, attrs):
    data, x = _model(4, **attrs), _x(shape)
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    got = offload.evaluate(offload.load(data), {"x": x})["y"]
    assert_close(got, want, rtol=sum_tolerance(np.float32, attrs["size"] + 4))


@pytest.mark.parametrize("shape, size", [((2, 8, 3, 5), 4), ((1, 6, 7), 2), ((2, 5), 6), ((1, 3, 2, 2), 1)])
def test_lrn_even_windows_and_other_ranks_match_the_definition(shape, size):
    x = _x(shape)
    got = offload.evaluate(offload.load(_model(len(shape), size=size, alpha=0.1)), {"x": x})["y"]
    want = lrn_float64(x, size, alpha=0.1).astype(np.float32)
    assert_close(got, want, rtol=sum_tolerance(np.float32, size + 4))
