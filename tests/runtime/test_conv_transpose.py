"""The CPU ConvTranspose kernel (runtime/kernels/conv.py) against onnxruntime: 1-D to 3-D,
strides, pads, output_padding, dilations, groups, auto_pad and output_shape, with and without
a bias. A sum of C/group · prod(kernel) products: two implementations are within
``sum_tolerance`` of that many terms (tests/reference.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from tests.reference import assert_close, onnxruntime_outputs, sum_tolerance

CASES = [
    # (x shape, w shape, attributes)
    ((1, 3, 7), (3, 2, 3), {}),
    ((2, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    ((1, 4, 5, 5), (4, 2, 3, 2), {"strides": [2, 3], "output_padding": [1, 2], "group": 2}),
    ((1, 2, 4, 6), (2, 3, 3, 3), {"dilations": [2, 1], "strides": [1, 2]}),
    ((1, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 9]}),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
]


def _model(xs, ws, attrs, bias: bool) -> bytes:
    rng = np.random.default_rng(11)
    w = rng.standard_normal(ws).astype(np.float32)
    group = attrs.get("group", 1)
    inits = [helper.make_tensor("w", TensorProto.FLOAT, ws, w.ravel())]
    if bias:
        b = rng.standard_normal(ws[1] * group).astype(np.float32) + 2  # far from zero: it shows
        inits.append(helper.make_tensor("b", TensorProto.FLOAT, b.shape, b))
    node = helper.make_node("ConvTranspose", ["x", "w", "b"] if bias else ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "convT",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs, ws, attrs", CASES)
def test_conv_transpose_matches_onnxruntime(xs, ws, attrs, bias):
    data = _model(xs, ws, attrs, bias)
    x = np.random.default_rng(12).standard_normal(xs).astype(np.float32)
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    got = offload.evaluate(offload.load(data), {"x": x})["y"]
    terms = xs[1] // attrs.get("group", 1) * math.prod(ws[2:]) + bias
    assert_close(got, want, rtol=sum_tolerance(np.float32, terms), err_msg=str(attrs))
