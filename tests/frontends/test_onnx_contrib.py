"""onnxruntime's com.microsoft contrib ops, imported as ONNX ops (frontends/onnx_contrib.py), against
onnxruntime running the same one-node models; and on the `opencl` backend with no kernel of their own."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.errors import UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.contrib_support import (
    ELEMENTWISE,
    SUMS,
    compare,
    contrib_model,
    node,
    normal,
    onnxruntime_run,
)

RNG = np.random.default_rng(2024)


def _x(*shape, scale=2.0):
    return normal(RNG, *shape, scale=scale)


@pytest.mark.parametrize(
    "op,extra,attrs",
    [
        ("Gelu", [], {}),
        ("FastGelu", [], {}),
        ("FastGelu", ["bias"], {}),
        ("BiasGelu", ["bias"], {}),
        ("QuickGelu", [], {}),
        ("QuickGelu", [], {"alpha": 1.5}),
    ],
)
def test_activations(op, extra, attrs):
    feeds = {"x": _x(2, 5, 16)}
    if extra:
        feeds["bias"] = _x(16)
    data = contrib_model([node(op, ["x", *extra], ["y"], **attrs)], feeds, ["y"])
    compare(data, feeds, **ELEMENTWISE)


def test_bias_add():
    feeds = {"x": _x(2, 3, 8), "bias": _x(8), "skip": _x(2, 3, 8)}
    data = contrib_model([node("BiasAdd", ["x", "bias", "skip"], ["y"])], feeds, ["y"])
    # onnxruntime runs BiasAdd on CUDA only: numpy, in the op's order, is the reference
    want = (feeds["x"] + feeds["bias"]) + feeds["skip"]
    got = offload.evaluate(offload.load(data), feeds)["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "a_shape,b_shape,attrs",
    [
        ((3, 4), (4, 5), {}),
        ((2, 3, 4), (2, 5, 4), {"transB": 1, "alpha": 0.5}),
        ((2, 4, 3), (4, 5), {"transA": 1}),
        ((2, 3, 4, 6), (2, 3, 5, 4), {"transA": 1, "transB": 1, "alpha": -2.0}),
        ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
        ((3, 2, 4), (2, 5, 4), {"transBatchA": 1, "transB": 1}),
        ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
        ((5, 2, 3, 4), (2, 3, 4, 6), {"transBatchA": 1, "transA": 0}),
        ((2, 4, 3, 5), (2, 4, 3, 6), {"transBatchA": 1, "transA": 1, "transBatchB": 1}),
    ],
)
def test_fused_matmul(a_shape, b_shape, attrs):
    feeds = {"a": _x(*a_shape, scale=1.0), "b": _x(*b_shape, scale=1.0)}
    data = contrib_model([node("FusedMatMul", ["a", "b"], ["y"], **attrs)], feeds, ["y"])
    compare(data, feeds, **SUMS)


@pytest.mark.parametrize(
    "activation,params,with_z",
    [
        ("Relu", [], False),
        ("Relu", [], True),
        ("Tanh", [], False),
        ("Sigmoid", [], True),
        ("LeakyRelu", [0.2], False),
        ("Clip", [-0.5, 0.7], False),
        ("HardSigmoid", [0.3, 0.4], True),
        ("", [], True),
    ],
)
def test_fused_conv(activation, params, with_z):
    feeds = {"x": _x(1, 3, 7, 6, scale=1.0)}
    inits = [("w", _x(4, 3, 3, 3, scale=0.3)), ("b", _x(4, scale=0.3))]
    inputs = ["x", "w", "b"]
    if with_z:
        feeds["z"] = _x(1, 4, 4, 3, scale=1.0)
        inputs.append("z")
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2], "kernel_shape": [3, 3]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    data = contrib_model([node("FusedConv", inputs, ["y"], **attrs)], feeds, ["y"], inits)
    compare(data, feeds, **SUMS)


def test_fused_conv_unknown_activation_is_refused():
    feeds = {"x": _x(1, 1, 3, 3)}
    data = contrib_model(
        [node("FusedConv", ["x", "w"], ["y"], activation="Swish")], feeds, ["y"], [("w", _x(1, 1, 1, 1))]
    )
    with pytest.raises(UnsupportedOpError, match=r"FusedConv.*activation 'Swish' is not supported"):
        offload.load(data)


@pytest.mark.parametrize("with_beta,with_bias", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("outputs", [1, 4])
def test_skip_layer_normalization(with_beta, with_bias, outputs):
    h = 32
    feeds = {"x": _x(2, 5, h), "skip": _x(2, 5, h)}
    inputs = ["x", "skip", "gamma", "beta" if with_beta else "", "bias" if with_bias else ""]
    inits = [("gamma", _x(h)), ("beta", _x(h)), ("bias", _x(h))]
    names = ["y", "", "", "sum"][:outputs]
    data = contrib_model(
        [node("SkipLayerNormalization", inputs, names, epsilon=1e-5)], feeds, [n for n in names if n], inits
    )
    compare(data, feeds, **SUMS)


@pytest.mark.parametrize("domain", ["", "com.microsoft"])
@pytest.mark.parametrize("with_inv", [False, True])
def test_simplified_layer_normalization(domain, with_inv):
    feeds = {"x": _x(2, 3, 24)}
    outputs = ["y", "inv"] if with_inv else ["y"]
    n = helper.make_node(
        "SimplifiedLayerNormalization", ["x", "scale"], outputs, axis=-1, epsilon=1e-6, domain=domain
    )
    data = contrib_model([n], feeds, outputs, [("scale", _x(24))])
    if domain == "com.microsoft":  # onnxruntime registers it in the ONNX domain only
        want = _rms(feeds["x"], 1e-6)
        got = offload.evaluate(offload.load(data), feeds)
        np.testing.assert_allclose(got["y"], want[0] * _const(data, "scale"), **SUMS)
        if with_inv:
            np.testing.assert_allclose(got["inv"], want[1], **SUMS)
        return
    compare(data, feeds, **SUMS)


def _rms(x: np.ndarray, eps: float):
    x64 = x.astype(np.float64)
    inv = 1 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return x64 * inv, inv


def _const(data: bytes, name: str) -> np.ndarray:
    return offload.load(data).main.body.constants[name].const_value


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_sum", [False, True])
def test_skip_simplified_layer_normalization(with_bias, with_sum):
    h = 16
    feeds = {"x": _x(3, 4, h), "skip": _x(3, 4, h)}
    inputs = ["x", "skip", "gamma"] + (["bias"] if with_bias else [])
    names = ["y", "", "inv", "sum"] if with_sum else ["y"]
    data = contrib_model(
        [node("SkipSimplifiedLayerNormalization", inputs, names, epsilon=1e-5)],
        feeds,
        [n for n in names if n],
        [("gamma", _x(h)), ("bias", _x(h))],
    )
    compare(data, feeds, **SUMS)


def test_unknown_domain_names_domain_and_op():
    feeds = {"x": _x(2, 3)}
    n = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [n],
        "g",
        [helper.make_tensor_value_info("x", 1, [2, 3])],
        [helper.make_tensor_value_info("y", 1, None)],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.example", 1)]
    data = helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()
    program = offload.load(data)
    with pytest.raises(UnsupportedOpError, match=r"no CPU kernel for com\.example::Frobnicate"):
        offload.evaluate(program, feeds)


def test_contrib_op_without_a_rewrite_names_domain_and_op():
    feeds = {"x": _x(2, 3)}
    data = contrib_model([node("NoSuchContribOp", ["x"], ["y"])], feeds, ["y"])
    with pytest.raises(UnsupportedOpError, match=r"no CPU kernel for com\.microsoft::NoSuchContribOp"):
        offload.evaluate(offload.load(data), feeds)


@needs_opencl
def test_decomposed_ops_run_on_opencl(tmp_path):
    h = 16
    feeds = {"x": _x(2, 4, h), "skip": _x(2, 4, h), "a": _x(2, 4, h, scale=1.0)}
    nodes = [
        node("FastGelu", ["x", "bias"], ["g"]),
        node("SkipLayerNormalization", ["g", "skip", "gamma", "beta"], ["ln"], epsilon=1e-5),
        node("QuickGelu", ["ln"], ["q"]),
        node("FusedMatMul", ["q", "a"], ["y"], transB=1, alpha=0.25),
    ]
    inits = [("bias", _x(h)), ("gamma", _x(h)), ("beta", _x(h))]
    data = contrib_model(nodes, feeds, ["y"], inits)
    want = onnxruntime_run(data, feeds)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
