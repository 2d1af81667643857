"""The `opencl` backend's Softmax / LogSoftmax and Layer-, RMS-, Instance-, GroupNormalization on
PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import offload
from tests.reference import lrn_float64

from .opencl_support import check, model, needs_opencl, plan_and_handle, run_on_opencl, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(11)
TOL = {"rtol": 1e-5, "atol": 1e-5, "whole": True}


def _normal(shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((3, 7), -1),
        ((2, 1000), 1),  # rows longer than the work-group
        ((4, 65), -1),
        ((1, 1), 0),
        ((6,), 0),
        ((2, 5, 4), 1),  # an outer axis: the strided kernel
        ((2, 3, 4), 0),
        ((2, 3, 4, 5), -2),
        ((2, 3, 1), 2),
    ],
)
def test_softmax(op, shape, axis, tmp_path):
    x = _normal(shape, 4)
    x.flat[0] = 80.0  # exp overflows without the max taken out
    p = model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-6, whole=True)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((4, 300), 1), ((4, 3, 2), 1)])
def test_softmax_nan_and_inf(op, shape, axis, tmp_path):
    # rows holding a NaN, +inf, only -inf, and an ordinary one: onnxruntime's NaN rows
    x = _normal(shape)
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2] = -np.inf
    p = model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, **TOL)


def test_softmax_rows_run_one_work_group_per_row():
    p = model([helper.make_node("Softmax", ["x"], ["y"])], [("x", [5, 300])], ["y"])
    _, h = plan_and_handle(p)
    ((launch,),) = [specialized(h).launches]
    assert launch.local_size is not None and launch.global_size[0] == 5 * launch.local_size[0]
    from offload.delegates.opencl.runtime import OpenCLRuntime

    OpenCLRuntime().destroy(h)


@pytest.mark.parametrize(
    "shape,axis,scale_shape,bias_shape",
    [
        ((3, 7), -1, (7,), (7,)),
        ((2, 1000), 1, (1000,), None),  # rows longer than the work-group, no bias
        ((2, 3, 65), 1, (3, 65), (3, 65)),  # several normalized axes
        ((2, 3, 5), -2, (5,), (1, 5)),  # scale / bias broadcast over the normalized shape
        ((4, 5), 0, (4, 5), (4, 5)),
        ((2, 3, 4, 5), 2, (4, 5), (5,)),
        ((3, 1), -1, (1,), (1,)),  # one element per row: zero variance
    ],
)
def test_layernorm(shape, axis, scale_shape, bias_shape, tmp_path):
    init = [("s", _normal(scale_shape))] + ([("b", _normal(bias_shape))] if bias_shape else [])
    inputs = ["x", "s"] + (["b"] if bias_shape else [])
    node = helper.make_node("LayerNormalization", inputs, ["y"], axis=axis, epsilon=1e-3)
    p = model([node], [("x", list(shape))], ["y"], init)
    check(p, {"x": _normal(shape, 2, 1)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


def test_layernorm_unused_statistics(tmp_path):
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1)
    init = [("s", _normal((6,))), ("b", _normal((6,)))]
    p = model([node], [("x", [4, 6])], ["y"], init)
    check(p, {"x": _normal((4, 6))}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


@pytest.mark.parametrize(
    "shape,axis,outputs",
    [
        ((4, 6), 1, ["y", "mean", "inv"]),
        ((2, 3, 300), -1, ["y", "mean", "inv"]),  # rows longer than the work-group
        ((2, 3, 4, 5), 1, ["y", "mean"]),  # InvStdDev absent: a scratch buffer takes it
        ((3, 5), 0, ["y", "", "inv"]),  # Mean absent
    ],
)
def test_layernorm_statistics(shape, axis, outputs, tmp_path):
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], outputs, axis=axis, epsilon=1e-3)
    normalized = shape[axis % len(shape) :]
    init = [("s", _normal(normalized)), ("b", _normal(normalized))]
    p = model([node], [("x", list(shape))], [o for o in outputs if o], init)
    check(p, {"x": _normal(shape, 2, 1)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


def test_layernorm_statistics_feed_other_ops(tmp_path):
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=-1)
    nodes = [node, helper.make_node("Mul", ["mean", "inv"], ["z"])]
    p = model(nodes, [("x", [5, 7])], ["y", "z"], [("s", _normal((7,)))])
    check(p, {"x": _normal((5, 7), 3, 2)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


def _rms_model(shape, axis, scale_shape, symbolic=None):
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-3)
    dims = [symbolic if symbolic and k == 0 else d for k, d in enumerate(shape)]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(_normal(scale_shape), "s")],
    )
    # RMSNormalization is an opset 23 op (opencl_support.model builds opset 21)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize(
    "shape,axis,scale_shape",
    [
        ((3, 7), -1, (7,)),
        ((2, 1000), 1, (1000,)),  # rows longer than the work-group
        ((2, 3, 65), 1, (3, 65)),  # several normalized axes
        ((2, 3, 5), -2, (1, 5)),  # scale broadcast over the normalized shape
        ((4, 5), 0, (4, 5)),
        ((3, 1), -1, (1,)),
    ],
)
def test_rmsnorm(shape, axis, scale_shape, tmp_path):
    onnx_model = _rms_model(shape, axis, scale_shape)
    x = _normal(shape, 2, 1)
    _check_onnx(onnx_model, {"x": x}, tmp_path)


def test_rmsnorm_symbolic_batch(tmp_path):
    onnx_model = _rms_model((2, 4, 8), -1, (8,), symbolic="batch")
    for batch in (1, 3):
        _check_onnx(onnx_model, {"x": _normal((batch, 4, 8))}, tmp_path)


def test_rmsnorm_scale_not_a_suffix_stays_on_cpu():
    p = offload.load(_rms_model((2, 3, 4), 1, (3, 1)).SerializeToString())
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert all(o.op_type != "Delegate" for o in lowered.main.body.operations)


def _check_onnx(onnx_model, feeds, tmp_path):
    """``onnx_model`` run whole on opencl against onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    lowered, got = run_on_opencl(offload.load(onnx_model.SerializeToString()), feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    np.testing.assert_allclose(got["y"], want, rtol=1e-4, atol=1e-4)


def test_layernorm_scale_not_a_suffix_stays_on_cpu():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], axis=1)
    p = model([node], [("x", [2, 3, 4])], ["y"], [("s", _normal((3, 1)))])
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert all(o.op_type != "Delegate" for o in lowered.main.body.operations)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 4, 1000), (3, 2, 7), (2, 3, 1, 1)])
def test_instancenorm(shape, tmp_path):
    C = shape[1]
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)
    init = [("s", _normal((C,))), ("b", _normal((C,)))]
    p = model([node], [("x", list(shape))], ["y"], init)
    check(p, {"x": _normal(shape, 3, -1)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


@pytest.mark.parametrize(
    "shape,groups", [((2, 6, 4, 5), 3), ((1, 4, 300), 2), ((2, 5, 3), 5), ((3, 4, 2, 2), 1)]
)
def test_groupnorm(shape, groups, tmp_path):
    C = shape[1]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-3)
    init = [("s", _normal((C,))), ("b", _normal((C,)))]
    p = model([node], [("x", list(shape))], ["y"], init)
    check(p, {"x": _normal(shape, 2, 1)}, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


def test_norm_chain_in_one_delegate(tmp_path):
    # a transformer-like block: LayerNorm → MatMul-free Softmax → LogSoftmax on another axis
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["n"], axis=-1),
        helper.make_node("Softmax", ["n"], ["p"], axis=-1),
        helper.make_node("LogSoftmax", ["p"], ["y"], axis=1),
    ]
    init = [("s", _normal((33,))), ("b", _normal((33,)))]
    p = model(nodes, [("x", [2, 9, 33])], ["y"], init)
    check(p, {"x": _normal((2, 9, 33))}, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


@pytest.mark.parametrize(
    "shape,attrs",
    [
        ((1, 5, 4, 4), {"size": 3}),
        ((2, 8, 3, 5), {"size": 5, "alpha": 0.001, "beta": 0.5, "bias": 2.0}),
        ((1, 7, 2, 2), {"size": 1}),
    ],
)
def test_lrn(shape, attrs, tmp_path):
    p = model([helper.make_node("LRN", ["x"], ["y"], **attrs)], [("x", list(shape))], ["y"])
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    check(p, {"x": x}, tmp_path, rtol=1e-5, atol=1e-6, whole=True)


@pytest.mark.parametrize("shape,size", [((2, 8, 3, 5), 4), ((1, 3, 7), 5), ((2, 6), 2)])
def test_lrn_even_windows_and_other_ranks(shape, size, tmp_path):
    """onnxruntime's LRN takes only 4-D inputs and odd sizes: numpy on ONNX's formula is the reference."""
    p = model([helper.make_node("LRN", ["x"], ["y"], size=size)], [("x", list(shape))], ["y"])
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    _, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1)
    np.testing.assert_allclose(got["y"], lrn_float64(x, size).astype(np.float32), rtol=1e-5, atol=1e-6)
