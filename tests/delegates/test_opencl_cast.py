"""The `opencl` backend's CastLike (Cast to another input's dtype) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, plan_and_handle, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(5)
TYPES = [np.float32, np.int32, np.int64, np.bool_]


def _data(dtype, shape):
    x = (RNG.standard_normal(shape) * 50).astype(np.float32)
    return x.astype(dtype)


@pytest.mark.parametrize("src", TYPES)
@pytest.mark.parametrize("dst", TYPES)
def test_castlike_every_pair(src, dst, tmp_path):
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    p = model([node], [("x", [3, 5], src), ("like", [2], dst)], [("y", dst)])
    check(p, {"x": _data(src, (3, 5)), "like": np.zeros(2, dst)}, tmp_path, whole=True)


def test_target_shape_need_not_broadcast(tmp_path):
    # the pattern of ONNX's function bodies: a scalar attribute cast to the dtype of a tensor,
    # then used with it; the target (7, 3) does not broadcast with the scalar output
    nodes = [
        helper.make_node("CastLike", ["alpha", "x"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["y"]),
        helper.make_node("CastLike", ["x", "k"], ["z"]),
    ]
    p = model(
        nodes,
        [("x", [7, 3]), ("k", [5], np.int64)],
        ["y", ("z", np.int64), ("a", np.float32)],
        [("alpha", np.array(2.5, np.float32))],
    )
    feeds = {"x": _data(np.float32, (7, 3)), "k": np.zeros(5, np.int64)}
    check(p, feeds, tmp_path, whole=True)


def test_castlike_is_a_step_of_its_own_reading_only_the_first_input():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("CastLike", ["r", "k"], ["y"]),
    ]
    p = model(nodes, [("x", [4]), ("k", [9], np.int32)], [("y", np.int32)])
    plan, h = plan_and_handle(p)
    try:
        assert [s["type"] for s in plan["ops"]] == ["Relu", "CastLike"]  # not fused
    finally:
        from offload.delegates.opencl.runtime import OpenCLRuntime

        OpenCLRuntime().destroy(h)


def test_fp16_storage(tmp_path):
    from offload import runtime

    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    p = model([node], [("x", [6], np.int32), ("like", [1])], ["y"])
    lowered = offload.to_backend(
        p, "opencl", compile_specs={"opencl": {"precision": "fp16", "mixed": "0"}}, passes="none"
    )
    assert [o.op_type for o in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    x = np.array([0, 1, -7, 2048, 2049, 70000], np.int32)  # 2049 rounds to 2048, 70000 overflows half
    feeds = {"x": x, "like": np.zeros(1, np.float32)}
    got = runtime.load(str(tmp_path / "m.pte")).run(feeds)["y"]
    with np.errstate(over="ignore"):  # onnxruntime's float32 result, as half storage keeps it
        want = reference(p, feeds)["y"].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dst", [np.float64, np.uint8])
def test_refused_target_types(dst):
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    p = model([node], [("x", [3]), ("like", [1], dst)], [("y", dst)])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "dtype" in support.reason
