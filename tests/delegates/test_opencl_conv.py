"""The `opencl` backend's Conv, ConvTranspose and pooling kernels on PoCL, against onnxruntime."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.delegates.opencl.runtime import OpenCLRuntime

from .opencl_support import (
    check,
    conv_kernels,
    model,
    needs_opencl,
    plan_and_handle,
    run_on_opencl,
    specialized,
)

pytestmark = needs_opencl
# Every case runs as one whole delegate. Conv inputs are multiples of 1/2, so sums are exact.
EXACT = {"rtol": 1e-5, "atol": 1e-5, "whole": True}
RNG = np.random.default_rng(7)


def _halves(shape):
    """Multiples of 1/2 (products multiples of 1/4): sums are exact in float32 in any order."""
    return (RNG.integers(-4, 5, shape) / 2).astype(np.float32)


def _conv_model(op, xs, ws, attrs, bias, weight_input=False):
    inputs = ["x", "w"] + (["b"] if bias else [])
    nb = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    init = ([] if weight_input else [("w", _halves(ws))]) + ([("b", _halves((nb,)))] if bias else [])
    graph_inputs = [("x", list(xs))] + ([("w", list(ws))] if weight_input else [])
    return model([helper.make_node(op, inputs, ["y"], **attrs)], graph_inputs, ["y"], init)


def _launched(program) -> list[str]:
    """The kernel names of a program lowered whole to opencl, in launch order."""
    _, handle = plan_and_handle(program)
    # matmul.cl has several GEMM kernels (gemm, gemm_naive, ...): they count as "gemm" here
    names = [launch.kernel.function_name for launch in specialized(handle).launches]
    names = ["gemm" if n.startswith("gemm") else n for n in names]
    OpenCLRuntime().destroy(handle)
    return names


def _stays_on_cpu(program) -> bool:
    lowered = offload.to_backend(program, "opencl", passes="none")
    return all(op.op_type != "Delegate" for op in lowered.main.body.operations)


# (X shape, W shape, attributes, bias, the kernels the strategy picks on a GPU; a CPU device
# runs direct only depthwise convs, and im2col_packed + the packed GEMM for conv_gemm)
CONV_CASES = [
    # direct on a GPU: few products per output (C/G * prod(kernel) < 64)
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True, {"conv_direct"}),
    (
        (2, 4, 9, 7),
        (6, 2, 3, 2),
        {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]},
        True,
        {"conv_direct"},
    ),
    # depthwise, and depthwise with a channel multiplier: direct
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, False, {"conv_direct"}),
    (
        (2, 3, 7, 6),
        (6, 1, 3, 3),
        {"group": 3, "strides": [2, 2], "pads": [0, 1, 2, 1]},
        True,
        {"conv_direct"},
    ),
    # one implicit GEMM (conv_gemm: im2col's columns gathered in its tile loads), bias at its store
    (
        (2, 8, 10, 9),
        (5, 8, 3, 3),
        {"dilations": [2, 3], "strides": [1, 2], "pads": [2, 0, 1, 3]},
        True,
        {"conv_gemm"},
    ),
    ((1, 16, 12, 11), (20, 16, 5, 4), {"strides": [3, 2], "pads": [2, 1, 2, 2]}, True, {"conv_gemm"}),
    # grouped: one implicit GEMM for every image and group, the bias at its store
    ((2, 16, 7, 8), (6, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True, {"conv_gemm"}),
    ((1, 24, 6, 6), (9, 8, 3, 3), {"group": 3}, False, {"conv_gemm"}),
    # 1x1, stride 1, unpadded: GEMM straight on X
    ((2, 6, 5, 5), (3, 6, 1, 1), {}, True, {"gemm"}),
    # 1x1 grouped: the groups one batch of GEMMs, the bias in it
    ((1, 8, 4, 6), (6, 4, 1, 1), {"group": 2}, True, {"gemm"}),
    ((2, 9, 3, 5), (6, 3, 1, 1), {"group": 3}, True, {"gemm"}),
    ((1, 70, 4, 3), (5, 70, 1, 1), {"strides": [2, 1]}, False, {"conv_gemm"}),
    ((1, 6, 5, 5), (4, 6, 1, 1), {"strides": [2, 2]}, True, {"conv_direct"}),
    # auto_pad (odd total padding with stride 2 tells UPPER from LOWER)
    ((1, 8, 8, 7), (4, 8, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True, {"conv_gemm"}),
    ((1, 8, 8, 7), (4, 8, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, True, {"conv_gemm"}),
    ((1, 2, 8, 7), (4, 2, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}, False, {"conv_direct"}),
    ((1, 8, 8, 7), (4, 8, 3, 3), {"auto_pad": "VALID", "strides": [2, 1]}, False, {"conv_gemm"}),
    ((1, 2, 5, 5), (3, 2, 2, 2), {"auto_pad": "SAME_UPPER"}, True, {"conv_direct"}),
    # 1-D and 3-D
    ((2, 8, 20), (4, 8, 9), {"strides": [2], "pads": [3, 4], "dilations": [2]}, True, {"conv_gemm"}),
    ((1, 3, 11), (2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2]}, True, {"conv_direct"}),
    (
        (1, 4, 5, 6, 7),
        (3, 4, 2, 3, 3),
        {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]},
        True,
        {"conv_gemm"},
    ),
    ((2, 2, 4, 5, 3), (4, 1, 2, 2, 2), {"group": 2, "dilations": [2, 1, 1]}, False, {"conv_direct"}),
    ((1, 4, 3, 4, 5), (2, 4, 1, 1, 1), {}, True, {"gemm"}),
]


@contextlib.contextmanager
def made_for(device_kind: str):
    """The opencl backend makes the kernels of this kind of device, whatever PoCL's device is: a
    CPU device writes im2col's columns straight into the packed GEMM's panels (``im2col_packed``)
    and runs depthwise convs by rows. (A context manager, not a fixture: the NVRTC tests collect
    these models from the parametrize marks.)"""
    from offload.delegates.opencl import runtime as cl_runtime

    original = cl_runtime.CLBuilder.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.device_kind = device_kind

    cl_runtime.CLBuilder.__init__ = init
    try:
        yield
    finally:
        cl_runtime.CLBuilder.__init__ = original


KINDS = ["cpu", "gpu"]


@pytest.mark.parametrize("device_kind", KINDS)
@pytest.mark.parametrize("xs,ws,attrs,bias,kernels", CONV_CASES)
def test_conv(xs, ws, attrs, bias, kernels, device_kind, tmp_path):
    p = _conv_model("Conv", xs, ws, attrs, bias)
    with made_for(device_kind):
        check(p, {"x": _halves(xs)}, tmp_path, **EXACT)
        launched = set(_launched(p))
    assert launched == conv_kernels(kernels, ws, attrs, bias, device_kind)


@pytest.mark.parametrize("device_kind", KINDS)
def test_conv_weights_as_an_input(device_kind, tmp_path):
    """The ONNX backend tests feed W as a graph input: the GEMM path must not need its values."""
    xs, ws = (2, 8, 6, 6), (4, 8, 3, 3)
    p = _conv_model("Conv", xs, ws, {"pads": [1, 1, 1, 1]}, True, weight_input=True)
    with made_for(device_kind):
        check(p, {"x": _halves(xs), "w": _halves(ws)}, tmp_path, **EXACT)


@pytest.mark.parametrize("device_kind", KINDS)
def test_conv_random_values(device_kind, tmp_path):
    xs, ws = (1, 32, 9, 9), (16, 32, 3, 3)
    w, bias = RNG.standard_normal(ws).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    p = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        [("x", list(xs))],
        ["y"],
        [("w", w), ("b", bias)],
    )
    with made_for(device_kind):
        check(
            p, {"x": RNG.standard_normal(xs).astype(np.float32)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True
        )


def test_conv_with_empty_batch(tmp_path):
    p = _conv_model("Conv", (0, 8, 6, 6), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}, True)
    check(p, {"x": np.zeros((0, 8, 6, 6), np.float32)}, tmp_path, **EXACT)


def test_conv_of_four_spatial_dims_stays_on_cpu():
    p = _conv_model("Conv", (1, 1, 3, 3, 3, 3), (1, 1, 2, 2, 2, 2), {}, False)
    assert _stays_on_cpu(p)


@pytest.mark.parametrize(
    "xs,ws,attrs,bias",
    [
        ((1, 3, 4, 5), (3, 2, 3, 3), {}, True),
        ((2, 2, 3, 4), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 1, 1]}, True),
        ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 0]}, False),
        ((1, 2, 4, 3), (2, 1, 2, 3), {"dilations": [2, 2], "strides": [1, 2], "pads": [1, 1, 0, 2]}, True),
        ((2, 4, 3, 3), (4, 2, 3, 3), {"group": 2, "strides": [2, 1]}, True),
        ((1, 6, 3, 2), (6, 1, 2, 2), {"group": 3, "strides": [2, 2], "output_padding": [1, 1]}, True),
        ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}, False),
        ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 5]}, True),
        ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
        ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, False),
        ((1, 2, 3, 4), (2, 2, 2, 3), {"strides": [2, 1], "auto_pad": "VALID"}, True),
        ((2, 3, 5), (3, 2, 3), {"strides": [2], "pads": [1, 2], "output_padding": [1]}, True),
        ((1, 2, 2, 3, 2), (2, 2, 2, 2, 3), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}, True),
    ],
)
def test_conv_transpose(xs, ws, attrs, bias, tmp_path):
    p = _conv_model("ConvTranspose", xs, ws, attrs, bias)
    check(p, {"x": _halves(xs)}, tmp_path, **EXACT)


POOL_CASES = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "pads": [2, 1, 0, 2], "strides": [2, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 0], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 1, 1, 0], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [4, 4], "strides": [2, 2], "auto_pad": "SAME_LOWER", "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "VALID"},
    {"kernel_shape": [2, 2], "dilations": [2, 3]},
    {"kernel_shape": [2, 3], "dilations": [3, 2], "strides": [2, 1], "pads": [1, 2, 1, 0]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2], "ceil_mode": 1},
]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("attrs", POOL_CASES)
def test_pool(op, attrs, tmp_path):
    if op != "AveragePool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    if op == "LpPool" and attrs.get("ceil_mode"):
        node = helper.make_node(op, ["x"], ["y"], **attrs)
        assert _stays_on_cpu(model([node], [("x", [2, 3, 7, 8])], ["y"]))  # not claimed
        return
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [2, 3, 7, 8])], ["y"])
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5, whole=True)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize(
    "shape,attrs",
    [
        ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        ((1, 2, 10), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
        ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]}),
        ((1, 2, 5, 6, 7), {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2]}),
    ],
)
def test_pool_1d_3d(op, shape, attrs, tmp_path):
    x = RNG.standard_normal(shape).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5, whole=True)


@pytest.mark.parametrize("p_norm", [1, 3])
def test_lppool_p(p_norm, tmp_path):
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], p=p_norm, pads=[1, 1, 1, 1])
    check(model([node], [("x", [1, 2, 6, 6])], ["y"]), {"x": x}, tmp_path, rtol=1e-5, atol=1e-5, whole=True)


def test_maxpool_propagates_nan(tmp_path):
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    x[0, 1, 1, 1] = np.nan
    p = model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", [1, 2, 4, 4])],
        ["y"],
    )
    _, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1)
    want = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    assert np.isnan(want[0, 1, 0, 0])
    np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (2, 3, 7), (1, 2, 3, 4, 5), (2, 3, 1, 1)])
def test_global_pool(op, shape, tmp_path):
    x = RNG.standard_normal(shape).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"])], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5, whole=True)


@pytest.mark.parametrize("op,reduce", [("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)])
def test_global_pool_of_rank_6(op, reduce, tmp_path):
    """onnxruntime refuses 4 spatial dims: numpy is the reference here."""
    x = RNG.standard_normal((2, 3, 2, 3, 2, 3)).astype(np.float32)
    p = model([helper.make_node(op, ["x"], ["y"])], [("x", list(x.shape))], ["y"])
    _, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1)
    np.testing.assert_allclose(got["y"], reduce(x, axis=(2, 3, 4, 5), keepdims=True), rtol=1e-5, atol=1e-6)


def test_global_max_pool_propagates_nan(tmp_path):
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    x[0, 1, 2, 0] = np.nan
    p = model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], [("x", [1, 2, 3, 3])], ["y"])
    _, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1)
    want = x.max(axis=(2, 3), keepdims=True)
    assert np.isnan(want[0, 1]).all() and not np.isnan(want[0, 0]).any()
    np.testing.assert_array_equal(got["y"], want)


def test_maxpool_storage_order_stays_on_cpu():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], storage_order=1)
    assert _stays_on_cpu(model([node], [("x", [1, 1, 6, 6])], ["y"]))


def test_maxpool_indices_output_stays_on_cpu():
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
    assert _stays_on_cpu(offload.load(onnx_model.SerializeToString()))
