"""The `opencl` backend's NN kernels (conv, pooling, batch norm, softmax, copy-free reshapes) on PoCL."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload

from .opencl_support import check, model, needs_opencl, plan_and_handle, run_on_opencl

pytestmark = needs_opencl
# Every case here runs as one whole delegate, compared at rtol = atol = 1e-5.
NN = {"rtol": 1e-5, "atol": 1e-5, "whole": True}
RNG = np.random.default_rng(1)


def _halves(shape):
    """Multiples of 1/2 (products multiples of 1/4): sums are exact in float32 in any order."""
    return (RNG.integers(-4, 5, shape) / 2).astype(np.float32)


@pytest.mark.parametrize(
    "xs,ws,attrs,bias",
    [
        ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True),
        ((2, 4, 9, 7), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}, True),
        ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, False),  # depthwise
        ((1, 2, 10, 9), (3, 2, 3, 3), {"dilations": [2, 3], "strides": [1, 2], "pads": [2, 0, 1, 3]}, True),
        ((1, 3, 5, 5), (2, 3, 1, 1), {}, False),
    ],
)
def test_conv(xs, ws, attrs, bias, tmp_path):
    inputs = ["x", "w"] + (["b"] if bias else [])
    init = [("w", _halves(ws))] + ([("b", _halves((ws[0],)))] if bias else [])
    p = model([helper.make_node("Conv", inputs, ["y"], **attrs)], [("x", list(xs))], ["y"], init)
    check(p, {"x": _halves(xs)}, tmp_path, **NN)


def test_conv_auto_pad_is_refused():
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")
    p = model([node], [("x", [1, 1, 4, 4])], ["y"], [("w", _halves((1, 1, 3, 3)))])
    lowered = offload.to_backend(p, "opencl")
    assert all(op.op_type != "Delegate" for op in lowered.main.body.operations)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        {"kernel_shape": [3, 3], "pads": [2, 1, 0, 2], "strides": [2, 3]},
    ],
)
def test_pool(op, attrs, tmp_path):
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [2, 3, 7, 8])], ["y"])
    check(p, {"x": x}, tmp_path, **NN)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op, tmp_path):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"])], [("x", [2, 3, 5, 6])], ["y"])
    check(p, {"x": x}, tmp_path, **NN)


@pytest.mark.parametrize(
    "attrs",
    [{"ceil_mode": 1}, {"dilations": [2, 2]}, {"storage_order": 1}],
)
def test_pool_refusals(attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], **attrs)
    p = model([node], [("x", [1, 1, 6, 6])], ["y"])
    lowered = offload.to_backend(p, "opencl")
    assert all(op.op_type != "Delegate" for op in lowered.main.body.operations)


def test_maxpool_indices_output_is_refused():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    lowered = offload.to_backend(offload.load(onnx_model.SerializeToString()), "opencl")
    assert all(op.op_type != "Delegate" for op in lowered.main.body.operations)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 6)])
def test_batchnorm(shape, tmp_path):
    C = shape[1]
    init = [
        ("s", RNG.standard_normal(C).astype(np.float32)),
        ("b", RNG.standard_normal(C).astype(np.float32)),
        ("m", RNG.standard_normal(C).astype(np.float32)),
        ("v", (np.abs(RNG.standard_normal(C)) + 0.5).astype(np.float32)),
    ]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    p = model([node], [("x", list(shape))], ["y"], init)
    check(p, {"x": RNG.standard_normal(shape).astype(np.float32)}, tmp_path, **NN)


@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 5, 4), 1), ((2, 3, 4), 0), ((6,), 0)])
def test_softmax(shape, axis, tmp_path):
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    x.flat[0] = 80.0  # exp overflows without the max subtraction
    p = model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-6, whole=True)


def test_reshapes_are_copy_free(tmp_path):
    from offload.delegates.opencl.runtime import OpenCLRuntime

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["a"]),
        helper.make_node("Unsqueeze", ["a", "ax0"], ["b"]),
        helper.make_node("Squeeze", ["b", "ax0"], ["c"]),
        helper.make_node("Flatten", ["c"], ["d"], axis=2),
        helper.make_node("Identity", ["d"], ["e"]),
        helper.make_node("Softmax", ["e"], ["y"], axis=1),
    ]
    init = [("shape", np.array([2, -1, 3], np.int64)), ("ax0", np.array([0], np.int64))]
    p = model(nodes, [("x", [2, 3, 4, 3])], ["y", "e"], init)
    x = RNG.standard_normal((2, 3, 4, 3)).astype(np.float32)
    check(p, {"x": x}, tmp_path, **NN)

    # the plan's alias outputs share the Relu's buffer: only Relu and Softmax launch kernels
    plan, h = plan_and_handle(p)
    assert len(h.launches) == 2
    relu_out = plan["ops"][0]["outputs"][0]
    for op in plan["ops"][1:6]:
        assert h.buffers[op["outputs"][0]] is h.buffers[relu_out]
    OpenCLRuntime().destroy(h)


def test_example_model_fully_delegated(example_model, tmp_path):
    p = offload.load(example_model)
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = offload.evaluate(p, {"image": x})
    lowered, got = run_on_opencl(p, {"image": x}, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-4, atol=1e-6)
