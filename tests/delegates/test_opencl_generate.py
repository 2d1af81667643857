"""The `opencl` backend's Range and Trilu (``generate.cl``) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(3)


def _range_model(dtype):
    node = helper.make_node("Range", ["start", "limit", "delta"], ["y"])
    return model([node], [(n, [], dtype) for n in ("start", "limit", "delta")], [("y", dtype)])


@pytest.mark.parametrize(
    "dtype,start,limit,delta",
    [
        (np.int32, 1, 11, 3),  # 1 4 7 10
        (np.int64, 10, -3, -4),  # a negative step
        (np.int64, 5, 5, 1),  # empty
        (np.int32, 9, 1, 2),  # empty: the wrong direction
        (np.float32, 1.5, 9.0, 0.25),  # values float32 holds exactly
        (np.float32, -2.0, 3.0, 0.5),
    ],
)
def test_range(dtype, start, limit, delta, tmp_path):
    feeds = {k: np.array(v, dtype) for k, v in zip(("start", "limit", "delta"), (start, limit, delta))}
    check(_range_model(dtype), feeds, tmp_path, whole=True, rtol=0, atol=0)


def test_range_specializes_per_value(tmp_path):
    # one program, run with several lengths: the inputs are read on the host each time
    p = _range_model(np.int64)
    lowered = offload.to_backend(p, "opencl", passes="none")
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    module = offload.runtime.load(str(path))
    for start, limit, delta in ((0, 4, 1), (3, 100, 7), (-5, 5, 5)):
        feeds = {"start": np.array(start), "limit": np.array(limit), "delta": np.array(delta)}
        got, want = module.run(feeds)["y"], reference(p, feeds)["y"]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_range_from_a_shape(tmp_path):
    # limit computed from x's shape: folded on the host; the range then feeds a kernel
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
        helper.make_node("Squeeze", ["s"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=1),
        helper.make_node("Add", ["x", "rf"], ["y"]),
    ]
    init = [("zero", np.array(0, np.int64)), ("one", np.array(1, np.int64))]
    p = model(nodes, [("x", [3, 6])], ["y"], init)
    check(p, {"x": RNG.standard_normal((3, 6)).astype(np.float32)}, tmp_path, whole=True)


def test_range_of_data_stays_on_the_cpu():
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Range", ["zero", "m", "one"], ["y"]),
    ]
    init = [("zero", np.array(0, np.float32)), ("one", np.array(1, np.float32))]
    p = model(nodes, [("x", [4])], ["y"], init)
    support = registry.get("opencl").compiler().supports(p.main.body.operations[1])
    assert not support and "data-dependent" in support.reason


def _trilu(dtype, shape, upper, with_k):
    names = ["x", "k"] if with_k else ["x"]
    node = helper.make_node("Trilu", names, ["y"], upper=upper)
    inputs = [("x", list(shape), dtype)] + ([("k", [], np.int64)] if with_k else [])
    return model([node], inputs, [("y", dtype)])


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("shape", [(4, 5), (5, 4), (2, 3, 3, 4), (1, 6), (3, 0)])
@pytest.mark.parametrize("k", [None, 0, 2, -1, -10, 10])
def test_trilu(upper, shape, k, tmp_path):
    x = RNG.standard_normal(shape).astype(np.float32)
    feeds = {"x": x} if k is None else {"x": x, "k": np.array(k, np.int64)}
    check(_trilu(np.float32, shape, upper, k is not None), feeds, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_trilu_types(dtype, tmp_path):
    x = RNG.integers(1, 9, size=(3, 4, 4)).astype(dtype)
    check(_trilu(dtype, (3, 4, 4), 0, True), {"x": x, "k": np.array(1, np.int64)}, tmp_path, whole=True)


def test_trilu_fp16(tmp_path):
    from offload import runtime

    p = _trilu(np.float32, (5, 6), 1, True)
    lowered = offload.to_backend(
        p, "opencl", compile_specs={"opencl": {"precision": "fp16", "mixed": "0"}}, passes="none"
    )
    offload.save(lowered, tmp_path / "m.pte")
    x = RNG.standard_normal((5, 6)).astype(np.float16).astype(np.float32)  # half holds it exactly
    feeds = {"x": x, "k": np.array(-1, np.int64)}
    got = runtime.load(str(tmp_path / "m.pte")).run(feeds)["y"]
    np.testing.assert_array_equal(got, reference(p, feeds)["y"])


def test_trilu_of_a_vector_is_refused():
    p = model([helper.make_node("Trilu", ["x"], ["y"])], [("x", [4])], ["y"])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "rank" in support.reason
