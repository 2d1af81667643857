"""Shape, Size and ConstantOfShape in an OpenCL partition: computed once at init, no kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from .opencl_support import check, model, needs_opencl, plan_and_handle, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(8)


@pytest.mark.parametrize(
    "attrs", [{}, {"start": 1}, {"start": -2}, {"end": -1}, {"start": 1, "end": 100}, {"start": 3, "end": 1}]
)
def test_shape(attrs, tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"], **attrs)]
    p = model(nodes, [("x", [2, 3, 5])], ["r", ("s", np.int64)])
    check(p, {"x": RNG.standard_normal((2, 3, 5)).astype(np.float32)}, tmp_path, rtol=0, atol=0, whole=True)


def test_size(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Size", ["r"], ["s"])]
    p = model(nodes, [("x", [4, 0, 3])], ["r", ("s", np.int64)])
    check(p, {"x": np.zeros((4, 0, 3), np.float32)}, tmp_path, rtol=0, atol=0, whole=True)


@pytest.mark.parametrize(
    "value,dtype",
    [
        (None, np.float32),
        (helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5]), np.float32),
        (helper.make_tensor("v", TensorProto.INT64, [1], [7]), np.int64),
    ],
)
def test_constant_of_shape_is_computed_at_init(value, dtype, tmp_path):
    attrs = {} if value is None else {"value": value}
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["c"], **attrs),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT)
        if dtype != np.float32
        else helper.make_node("Identity", ["c"], ["cf"]),
        helper.make_node("Mul", ["x", "cf"], ["y"]),
    ]
    p = model(nodes, [("x", [2, 3])], ["y"], [("shape", np.array([2, 3], np.int64))])
    feeds = {"x": RNG.standard_normal((2, 3)).astype(np.float32)}
    if dtype == np.float32:
        check(p, feeds, tmp_path, rtol=0, atol=0, whole=True)
        _plan, h = plan_and_handle(p)
        try:
            assert len(specialized(h).launches) == 1  # the Mul; the constant was uploaded at init
        finally:
            from offload.delegates.opencl.runtime import OpenCLRuntime

            OpenCLRuntime().destroy(h)
    else:
        check(p, feeds, tmp_path, rtol=0, atol=0)


def test_reshape_to_a_computed_shape_is_a_view(tmp_path):
    """Shape → Concat → Reshape (a flatten written the ONNX-export way) stays one partition."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"], end=1),
        helper.make_node("Concat", ["s", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["f"]),
        helper.make_node("Dropout", ["f"], ["y"]),
    ]
    p = model(nodes, [("x", [2, 3, 4])], ["y"], [("minus1", np.array([-1], np.int64))])
    check(p, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}, tmp_path, rtol=0, atol=0, whole=True)


def test_dropout_in_training_mode_stays_on_the_cpu():
    import offload

    nodes = [helper.make_node("Dropout", ["x", "ratio", "train"], ["y"])]
    init = [("ratio", np.array(0.5, np.float32)), ("train", np.array(True))]
    p = model(nodes, [("x", [2, 3])], ["y"], init)
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert all(op.op_type != "Delegate" for op in lowered.main.body.operations)


def test_dropout_with_an_unread_mask_is_a_view(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Dropout", ["r"], ["y", "mask"])]
    p = model(nodes, [("x", [2, 3])], ["y"])
    check(p, {"x": RNG.standard_normal((2, 3)).astype(np.float32)}, tmp_path, rtol=0, atol=0, whole=True)
