"""The `opencl` backend's ScatterElements, ScatterND and GatherND (``scatter.cl``) on PoCL, against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(31)
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _data(shape, dtype=np.float32):
    if dtype == np.float32:
        return RNG.standard_normal(shape).astype(np.float32)
    return RNG.integers(-5, 6, size=shape).astype(dtype)


def _distinct(ishape, axis, dim):
    """Indices with no duplicate along ``axis`` (onnxruntime leaves the winner of one open under
    reduction=none), half of them negative."""
    full = list(ishape)
    full[axis] = dim
    idx = np.take(np.argsort(RNG.random(full), axis=axis), range(ishape[axis]), axis=axis)
    return np.where(RNG.random(ishape) < 0.5, idx - dim, idx).astype(np.int64)


def _scatter_elements(shape, ishape, axis, dtype=np.float32, idx_dtype=np.int64, **attrs):
    node = helper.make_node("ScatterElements", ["data", "i", "u"], ["y"], axis=axis, **attrs)
    ins = [("data", list(shape), dtype), ("i", list(ishape), idx_dtype), ("u", list(ishape), dtype)]
    return model([node], ins, [("y", dtype)])


ELEMENTS = [((5, 4), (3, 3), 0), ((3, 6), (2, 4), 1), ((2, 3, 4), (2, 2, 3), 1), ((4, 3, 5), (2, 2, 5), -1)]


@pytest.mark.parametrize("shape,ishape,axis", ELEMENTS)
def test_scatter_elements(shape, ishape, axis, tmp_path):
    p = _scatter_elements(shape, ishape, axis)
    feeds = {"data": _data(shape), "i": _distinct(ishape, axis, shape[axis]), "u": _data(ishape)}
    check(p, feeds, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("reduction", REDUCTIONS[1:])
@pytest.mark.parametrize("shape,ishape,axis", [((5, 4), (9, 3), 0), ((2, 3, 4), (2, 3, 11), -1)])
def test_scatter_elements_reduction_with_duplicates(shape, ishape, axis, reduction, tmp_path):
    p = _scatter_elements(shape, ishape, axis, reduction=reduction)
    dim = shape[axis]
    idx = RNG.integers(-dim, dim, size=ishape).astype(np.int64)  # more indices than the axis holds
    feeds = {"data": _data(shape), "i": idx, "u": _data(ishape)}
    # a sum of duplicates in the order of onnxruntime's loop: equal within rounding of that order
    check(p, feeds, tmp_path, whole=True, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements_ints(dtype, reduction, tmp_path):
    p = _scatter_elements((4, 5), (4, 3), 1, dtype, np.int32, reduction=reduction)
    feeds = {
        "data": _data((4, 5), dtype),
        "i": _distinct((4, 3), 1, 5).astype(np.int32),
        "u": _data((4, 3), dtype),
    }
    check(p, feeds, tmp_path, whole=True, rtol=0, atol=0)


def _scatter_nd(shape, ishape, ushape, dtype=np.float32, **attrs):
    node = helper.make_node("ScatterND", ["data", "i", "u"], ["y"], **attrs)
    ins = [("data", list(shape), dtype), ("i", list(ishape), np.int64), ("u", list(ushape), dtype)]
    return model([node], ins, [("y", dtype)])


def _rows(count, dims, distinct):
    """``count`` index rows into ``dims``, all different when ``distinct``, some negative."""
    flat = RNG.permutation(int(np.prod(dims)))[:count] if distinct else RNG.integers(0, np.prod(dims), count)
    rows = np.stack(np.unravel_index(flat, dims), axis=-1).astype(np.int64)
    return np.where(RNG.random(rows.shape) < 0.3, rows - np.array(dims), rows)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape,K,lead", [((4, 4, 4), 1, (3,)), ((5, 3, 2), 2, (2, 3)), ((3, 4), 2, (6,))])
def test_scatter_nd(shape, K, lead, reduction, tmp_path):
    ushape = (*lead, *shape[K:])
    p = _scatter_nd(shape, (*lead, K), ushape, reduction=reduction)
    count = int(np.prod(lead))
    idx = _rows(count, shape[:K], distinct=reduction == "none").reshape(*lead, K)
    feeds = {"data": _data(shape), "i": idx, "u": _data(ushape)}
    check(p, feeds, tmp_path, whole=True, rtol=1e-6, atol=1e-6)


def _gather_nd(shape, ishape, dtype=np.float32, **attrs):
    node = helper.make_node("GatherND", ["data", "i"], ["y"], **attrs)
    return model([node], [("data", list(shape), dtype), ("i", list(ishape), np.int64)], [("y", dtype)])


@pytest.mark.parametrize(
    "shape,lead,K,batch",
    [((4, 5, 6), (3,), 1, 0), ((4, 5, 6), (2, 3), 2, 0), ((4, 5, 6), (7,), 3, 0), ((3, 4, 5), (3, 2), 1, 1),
     ((2, 3, 4, 5), (2, 3, 4), 2, 2), ((3, 4), (3, 2), 0, 1)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_gather_nd(shape, lead, K, batch, dtype, tmp_path):
    p = _gather_nd(shape, (*lead, K), dtype, batch_dims=batch)
    if K:
        idx = _rows(int(np.prod(lead)), shape[batch : batch + K], distinct=False).reshape(*lead, K)
    else:  # empty index rows: whole slices
        idx = np.zeros((*lead, 0), np.int64)
    check(p, {"data": _data(shape, dtype), "i": idx}, tmp_path, whole=True, rtol=0, atol=0)


def test_out_of_range_indices_stay_in_bounds(tmp_path):
    """onnxruntime rejects them; the device skips such an update and gathers 0 for such an index."""
    data, idx, u = _data((3, 4)), np.array([[0, 9], [-7, 1]], np.int64), _data((2, 2))
    _, got = run_on_opencl(_scatter_elements((3, 4), (2, 2), 1), {"data": data, "i": idx, "u": u}, tmp_path)
    want = data.copy()
    want[0, 0], want[1, 1] = u[0, 0], u[1, 1]
    np.testing.assert_array_equal(got["y"], want)
    _, got = run_on_opencl(
        _gather_nd((3, 4), (2, 2)), {"data": data, "i": np.array([[1, 2], [3, 0]])}, tmp_path
    )
    np.testing.assert_array_equal(got["y"], [data[1, 2], 0])


def _refused(p) -> str:
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support
    return support.reason


def test_bool_reduction_is_refused():
    p = _scatter_nd((4,), (2, 1), (2,), np.bool_, reduction="add")
    assert "reduction=add of bool" in _refused(p)


def test_float64_is_refused():
    assert "dtype" in _refused(_gather_nd((3, 4), (2, 2), np.float64))
