"""The `opencl` backend's OneHot and EyeLike (``onehot.cl``) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(41)


def _one_hot(ishape, idx_dtype, value_dtype, **attrs):
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], **attrs)
    ins = [("i", list(ishape), idx_dtype), ("depth", [], np.int64), ("values", [2], value_dtype)]
    return model([node], ins, [("y", value_dtype)])


def _expected(idx, depth, values, axis):
    """OneHot in numpy, as the ONNX spec reads (onnxruntime lacks most of these type mixes)."""
    axis %= idx.ndim + 1
    v = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    return np.where(np.expand_dims(v, axis) == positions, values[1], values[0])


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32, np.float32])
def test_one_hot(axis, idx_dtype, tmp_path):
    depth = 6
    # in range, negative in range, and out of range on both sides (all off)
    idx = RNG.integers(-depth - 2, depth + 2, size=(3, 4)).astype(idx_dtype)
    p = _one_hot((3, 4), idx_dtype, np.float32, axis=axis)
    feeds = {"i": idx, "depth": np.array(depth, np.int64), "values": np.array([-1.5, 2.0], np.float32)}
    if idx_dtype == np.int64:  # onnxruntime has OneHot for few type mixes: this one among them
        check(p, feeds, tmp_path, whole=True, rtol=0, atol=0)
    _, got = run_on_opencl(p, feeds, tmp_path, partitions=1)
    want = _expected(idx, depth, feeds["values"], axis)
    assert got["y"].dtype == want.dtype
    np.testing.assert_array_equal(got["y"], want)


@pytest.mark.parametrize("value_dtype", [np.int32, np.int64, np.bool_])
def test_one_hot_other_values(value_dtype, tmp_path):
    p = _one_hot((5,), np.int64, value_dtype)
    idx, values = np.array([0, 3, -1, 9, 2], np.int64), np.array([0, 7], value_dtype)
    feeds = {"i": idx, "depth": np.array(4, np.int64), "values": values}
    _, got = run_on_opencl(p, feeds, tmp_path, partitions=1)
    want = _expected(idx, 4, values, -1)
    assert got["y"].dtype == want.dtype
    np.testing.assert_array_equal(got["y"], want)


def test_depth_computed_from_data_stays_on_the_cpu():
    nodes = [
        helper.make_node("ReduceMax", ["n"], ["depth"], keepdims=0),
        helper.make_node("OneHot", ["i", "depth", "values"], ["y"]),
    ]
    p = model(nodes, [("i", [3], np.int64), ("n", [4], np.int64), ("values", [2])], ["y"])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[1])
    assert not support and "data-dependent" in support.reason


def _eye_like(shape, x_dtype, **attrs):
    node = helper.make_node("EyeLike", ["x"], ["y"], **attrs)
    out = helper.tensor_dtype_to_np_dtype(attrs["dtype"]) if "dtype" in attrs else x_dtype
    return model([node], [("x", list(shape), x_dtype)], [("y", out)])


@pytest.mark.parametrize("k", [0, 1, -2, 7])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2)])
def test_eye_like(shape, k, tmp_path):
    p = _eye_like(shape, np.float32, k=k)
    check(p, {"x": RNG.standard_normal(shape).astype(np.float32)}, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT])
def test_eye_like_dtype(to, tmp_path):
    p = _eye_like((3, 4), np.int32, dtype=to, k=1)
    check(p, {"x": np.zeros((3, 4), np.int32)}, tmp_path, whole=True, rtol=0, atol=0)


def test_float64_is_refused():
    p = _eye_like((3, 4), np.int32, dtype=TensorProto.DOUBLE)
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "dtype" in support.reason


def test_constant_depth(tmp_path):
    """depth as a weight: the plan's shapes are all known when it is built."""
    node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=0)
    inits = [("depth", np.array(5, np.int64)), ("values", np.array([0.5, 3.0], np.float32))]
    p = model([node], [("i", [4], np.int64)], ["y"], inits)
    check(p, {"i": np.array([1, -2, 7, 4], np.int64)}, tmp_path, whole=True, rtol=0, atol=0)
