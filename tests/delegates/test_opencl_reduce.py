"""The `opencl` backend's reductions (Reduce*, ArgMax, ArgMin) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload

from .opencl_support import check, model, needs_opencl, plan_and_handle, run_on_opencl, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(7)
TOL = {"rtol": 1e-5, "atol": 1e-5, "whole": True}

REDUCES = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]


def _data(op, shape):
    """Inputs each reduction is defined on: positive for ReduceLogSum, near 1 for ReduceProd
    (products of many elements stay finite)."""
    x = RNG.standard_normal(shape).astype(np.float32)
    if op == "ReduceLogSum":
        return np.abs(x) + np.float32(0.1)
    if op == "ReduceProd":
        return (1 + x / 16).astype(np.float32)
    return x * 3


def _reduce_model(op, shape, axes, keepdims=1, noop=0, dtype=np.float32):
    inputs = ["x"] if axes is None else ["x", "axes"]
    init = [] if axes is None else [("axes", np.array(axes, np.int64))]
    node = helper.make_node(op, inputs, ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    return model([node], [("x", list(shape), dtype)], [("y", dtype)], init)


@pytest.mark.parametrize("op", REDUCES)
@pytest.mark.parametrize(
    "shape,axes,keepdims",
    [
        ((3, 7), [1], 1),  # rows shorter than the work-group
        ((5, 1000), [-1], 0),  # rows longer than the work-group
        ((2, 3, 65), [1, 2], 1),  # several trailing axes: one contiguous row each
        ((4, 5, 6), [0, 2], 0),  # non-adjacent axes, innermost reduced: strided work-groups
        ((4, 5, 6), [1], 1),  # innermost axis kept: one work-item per output
        ((2, 3, 4, 5), [0, 2], 0),  # non-adjacent, innermost kept
        ((3, 1, 4), [1], 0),  # a size-1 axis
        ((7,), None, 1),  # no axes: all of them
        ((2, 3, 4), None, 0),
        ((1,), [0], 1),
    ],
)
def test_reduce(op, shape, axes, keepdims, tmp_path):
    p = _reduce_model(op, shape, axes, keepdims)
    rtol = 1e-4 if op in ("ReduceProd", "ReduceLogSumExp") else 1e-5
    x = _data(op, shape)
    atol = 1e-5
    if op == "ReduceSum":
        # a float32 sum of n values of spread s, added in another order than onnxruntime's, errs by
        # about u * n * s (u = 2**-24): 1.8e-4 for 1,000 values of spread 3, whose sum may cancel
        # to O(1) (4.6e-5 seen on an H200), past what rtol allows
        count = x.size // int(np.prod(p.main.outputs[0].type.shape or (1,)))
        atol = max(atol, 2 * 2.0**-24 * count * float(np.std(x)))
    check(p, {"x": x}, tmp_path, rtol=rtol, atol=atol, whole=True)


@pytest.mark.parametrize("op", REDUCES)
def test_reduce_scalar(op, tmp_path):
    p = _reduce_model(op, (), None, 1)
    check(p, {"x": np.array(_data(op, ()), np.float32)}, tmp_path, **TOL)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape,axes", [((4, 300), [1]), ((3, 4, 5), [0, 2]), ((3, 4, 5), [1])])
def test_reduce_ints(op, dtype, shape, axes, tmp_path):
    x = RNG.integers(-1000, 1000, shape).astype(dtype)
    if op != "ReduceSum":  # extremes of the type (a sum of them would overflow)
        x.flat[0] = np.iinfo(dtype).min + 1 if op == "ReduceMin" else np.iinfo(dtype).max - 1
    check(_reduce_model(op, shape, axes, 0, dtype=dtype), {"x": x}, tmp_path, **TOL)


@pytest.mark.parametrize("op", [op for op in REDUCES if op != "ReduceMean"])
@pytest.mark.parametrize("shape,axes", [((3, 0), [1]), ((0, 4), [0]), ((2, 0, 3), [1])])
def test_reduce_empty_set(op, shape, axes, tmp_path):
    p = _reduce_model(op, shape, axes, 1)
    check(p, {"x": np.zeros(shape, np.float32)}, tmp_path, **TOL)


def test_reduce_empty_output(tmp_path):
    # a kept axis of extent 0: nothing to launch, an empty result
    p = _reduce_model("ReduceSum", (0, 5), [1], 0)
    check(p, {"x": np.zeros((0, 5), np.float32)}, tmp_path, **TOL)


@pytest.mark.parametrize("axes", [None, []])
def test_noop_with_empty_axes(axes, tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(
            "ReduceSum", ["r"] + ([] if axes is None else ["axes"]), ["y"], noop_with_empty_axes=1
        ),
    ]
    init = [] if axes is None else [("axes", np.array(axes, np.int64))]
    p = model(nodes, [("x", [3, 4])], ["y"], init)
    check(p, {"x": RNG.standard_normal((3, 4)).astype(np.float32)}, tmp_path, **TOL)


@pytest.mark.parametrize("op,fn", [("ReduceMax", np.max), ("ReduceMin", np.min)])
@pytest.mark.parametrize("shape,axes", [((4, 200), [1]), ((4, 5, 6), [1])])
def test_max_min_propagate_nan(op, fn, shape, axes, tmp_path):
    # numpy's NaN semantics (onnxruntime skips NaN in ReduceMax / ReduceMin)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[0, 3] = np.nan
    x[-1, -1] = np.nan
    _, got = run_on_opencl(_reduce_model(op, shape, axes, 0), {"x": x}, tmp_path, partitions=1)
    want = fn(x, axis=tuple(axes))
    assert np.isnan(want).any()
    np.testing.assert_array_equal(got["y"], want)


def test_log_sum_exp_is_stable(tmp_path):
    x = RNG.standard_normal((3, 300)).astype(np.float32)
    x[0, 5] = 200.0  # exp overflows without the max taken out
    x[1, :] = -np.inf
    x[2, 7] = np.inf
    check(_reduce_model("ReduceLogSumExp", (3, 300), [1], 0), {"x": x}, tmp_path, **TOL)


def test_row_reduction_is_one_work_group_per_row():
    p = _reduce_model("ReduceSum", (6, 1000), [1], 0)
    _, h = plan_and_handle(p)
    ((launch,),) = [specialized(h).launches]
    assert launch.local_size is not None and launch.global_size[0] == 6 * launch.local_size[0]
    from offload.delegates.opencl.runtime import OpenCLRuntime

    OpenCLRuntime().destroy(h)


@pytest.mark.parametrize(
    "op,dtype,shape,axes",
    [
        ("ReduceMean", np.float32, (3, 0), [1]),  # the mean of nothing
        ("ReduceMax", np.int32, (3, 0), [1]),  # no integer infinity
        ("ReduceProd", np.int64, (3, 4), [1]),
        ("ReduceL2", np.int32, (3, 4), [1]),
    ],
)
def test_refused_reductions_stay_on_cpu(op, dtype, shape, axes):
    lowered = offload.to_backend(_reduce_model(op, shape, axes, 1, dtype=dtype), "opencl", passes="none")
    assert all(o.op_type != "Delegate" for o in lowered.main.body.operations)


def test_axes_given_as_an_input_are_read_on_the_host(tmp_path):
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    p = model([node], [("x", [3, 4]), ("axes", [1], np.int64)], ["y"])
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for axis in (1, 0, -1):
        check(p, {"x": x, "axes": np.array([axis], np.int64)}, tmp_path, whole=True)


def test_axes_computed_from_data_stay_on_cpu():
    nodes = [
        helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),  # data, not shapes
        helper.make_node("ReduceSum", ["x", "a"], ["y"]),
    ]
    p = model(nodes, [("x", [1, 4])], ["y"])
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert [o.op_type for o in lowered.main.body.operations][-1] == "ReduceSum"


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(
    "shape,axis,keepdims",
    [
        ((3, 7), 1, 1),
        ((5, 1000), -1, 0),
        ((4, 5, 6), 1, 1),
        ((4, 5, 6), 0, 0),
        ((7,), 0, 0),
        ((2, 1, 3), 1, 1),
    ],
)
@pytest.mark.parametrize("last", [0, 1])
def test_arg(op, shape, axis, keepdims, last, tmp_path):
    # few distinct values: ties decide between the first and the last index
    x = RNG.integers(-3, 4, shape).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)
    p = model([node], [("x", list(shape))], [("y", np.int64)])
    check(p, {"x": x}, tmp_path, **TOL)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_nan(op, last, tmp_path):
    x = np.array([[1, np.nan, 2], [np.nan, 1, 2], [1, 2, np.nan], [np.inf, 1, np.inf]], np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=1, select_last_index=last)
    p = model([node], [("x", [4, 3])], [("y", np.int64)])
    check(p, {"x": x}, tmp_path, **TOL)
