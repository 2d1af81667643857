"""The `opencl` backend's NN kernels (batch norm, softmax, copy-free reshapes) on PoCL.

Conv and pooling are in ``test_opencl_conv.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from tests.reference import assert_close, onnxruntime_outputs, reduction_terms, sum_tolerance

from .opencl_support import check, model, needs_opencl, plan_and_handle, run_on_opencl, specialized

pytestmark = needs_opencl
# Every case here runs as one whole delegate, compared at rtol = atol = 1e-5.
NN = {"rtol": 1e-5, "atol": 1e-5, "whole": True}
RNG = np.random.default_rng(1)


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


# negative axes counted from the end, on inputs where |axis| names another axis
@pytest.mark.parametrize(
    "shape,axis",
    [
        ((3, 7), -1),
        ((2, 5, 4), 1),
        ((2, 3, 4), 0),
        ((6,), 0),
        ((2, 3, 4), -1),
        ((2, 3, 4, 5), -2),
        ((4, 3, 2), -3),
    ],
)
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
    assert len(specialized(h).launches) == 2
    relu_out = plan["ops"][0]["outputs"][0]
    for op in plan["ops"][1:6]:
        assert specialized(h).buffers[op["outputs"][0]] is specialized(h).buffers[relu_out]
    OpenCLRuntime().destroy(h)


def test_example_model_fully_delegated(example_model, tmp_path):
    p = offload.load(example_model)
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = onnxruntime_outputs(example_model, {"image": x})
    lowered, got = run_on_opencl(p, {"image": x}, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        assert_close(got[k], v, rtol=sum_tolerance(np.float32, reduction_terms(example_model)), err_msg=k)
