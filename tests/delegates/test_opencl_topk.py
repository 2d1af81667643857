"""The `opencl` backend's TopK (``topk.cl``) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(23)


def _model(shape, dtype=np.float32, **attrs):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], **attrs)
    return model(
        [node], [("x", list(shape), dtype), ("k", [1], np.int64)], [("values", dtype), ("indices", np.int64)]
    )


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize(
    "shape,axis,k", [((3, 7), -1, 3), ((3, 7), 1, 7), ((4, 5, 6), 1, 2), ((4, 5, 6), 0, 4), ((9,), 0, 1)]
)
def test_top_k(shape, axis, k, largest, tmp_path):
    p = _model(shape, axis=axis, largest=largest)
    x = RNG.standard_normal(shape).astype(np.float32)
    check(p, {"x": x, "k": np.array([k], np.int64)}, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("largest", [0, 1])
def test_ties_keep_the_lower_index_first(dtype, largest, tmp_path):
    p = _model((5, 8), dtype, axis=1, largest=largest)
    x = RNG.integers(0, 3, size=(5, 8)).astype(dtype)  # many equal values
    check(p, {"x": x, "k": np.array([5], np.int64)}, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64])
@pytest.mark.parametrize("largest", [0, 1])
def test_unsigned(dtype, largest, tmp_path):
    """onnxruntime has no unsigned TopK: numpy's stable argsort is the reference."""
    p = _model((5, 8), dtype, axis=1, largest=largest)
    x = RNG.integers(0, 3, size=(5, 8)).astype(dtype)
    _, got = run_on_opencl(p, {"x": x, "k": np.array([5], np.int64)}, tmp_path, partitions=1)
    key = -x.astype(np.int64) if largest else x.astype(np.int64)
    order = np.argsort(key, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got["indices"], order)
    np.testing.assert_array_equal(got["values"], np.take_along_axis(x, order, axis=1))
    assert got["values"].dtype == dtype


def test_k_zero(tmp_path):
    p = _model((3, 4), axis=1)
    check(p, {"x": RNG.standard_normal((3, 4)).astype(np.float32), "k": np.array([0], np.int64)}, tmp_path)


def test_k_computed_from_data_stays_on_the_cpu():
    nodes = [
        helper.make_node("ReduceMax", ["n"], ["k"], keepdims=1),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"]),
    ]
    p = model(nodes, [("x", [4, 6]), ("n", [3], np.int64)], ["values", ("indices", np.int64)])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[1])
    assert not support and "data-dependent" in support.reason


def test_float64_is_refused():
    p = _model((3, 4), np.float64)
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "dtype" in support.reason


def test_constant_k(tmp_path):
    """k as a weight: the plan's shapes are all known when it is built."""
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=0, largest=0)
    p = model([node], [("x", [6, 3])], ["values", ("indices", np.int64)], [("k", np.array([4], np.int64))])
    check(p, {"x": RNG.standard_normal((6, 3)).astype(np.float32)}, tmp_path, whole=True, rtol=0, atol=0)
