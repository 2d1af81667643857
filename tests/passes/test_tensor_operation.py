"""optimize_tensor_operation::{replace_stack_reshape, use_reflection_padding, fuse_onehot_matmul_to_gather}."""

import numpy as np
import pytest
from onnx import TensorProto

from .helpers import F32, check, model, node, op_types, optimized, rand

I64 = np.int64
STACK = ["optimize_tensor_operation::replace_stack_reshape"]
REFLECT = ["optimize_tensor_operation::use_reflection_padding"]
GATHER = ["optimize_tensor_operation::fuse_onehot_matmul_to_gather"]


# ---- replace_stack_reshape ----------------------------------------------------------------------


def _stack_reshape(axis, target, n=2, shape=(1, 5, 3)):
    names = [f"x{k}" for k in range(n)]
    nodes = [node("Unsqueeze", [x, "a"], [f"u{x}"]) for x in names]
    nodes += [node("Concat", [f"u{x}" for x in names], ["s"], axis=axis), node("Reshape", ["s", "t"], ["y"])]
    inits = {"a": np.array([axis], I64), "t": np.array(target, I64)}
    return model(nodes, {x: (F32, list(shape)) for x in names}, {"y": (F32, None)}, inits)


@pytest.mark.parametrize(
    "axis, target, n",
    [(1, [1, 10, 3], 2), (0, [3, 5, 3], 3), (2, [1, 5, 9], 3), (-2, [1, 5, 6], 2)],
)
def test_stack_merged_into_the_next_axis_is_a_concat(axis, target, n):
    feeds = {f"x{k}": rand(1, 5, 3, seed=k) for k in range(n)}
    out = check(_stack_reshape(axis, target, n), STACK, feeds, rtol=0, atol=0)
    assert op_types(out) == {"Concat": 1}


def test_stack_merged_into_the_previous_axis_or_reshaped_otherwise_stays():
    for axis, target in [(2, [1, 10, 3]), (1, [2, 15]), (3, [1, 5, 6])]:  # interleave; other; last axis
        _original, out = optimized(_stack_reshape(axis, target), STACK)
        assert op_types(out) == {"Unsqueeze": 2, "Concat": 1, "Reshape": 1}


# ---- use_reflection_padding ---------------------------------------------------------------------


def _slice(x, start, end, axis, out, steps=None):
    names = [x, f"{out}_s", f"{out}_e", f"{out}_a"] + ([f"{out}_p"] if steps is not None else [])
    inits = {
        f"{out}_s": np.array([start], I64),
        f"{out}_e": np.array([end], I64),
        f"{out}_a": np.array([axis], I64),
    }
    if steps is not None:
        inits[f"{out}_p"] = np.array([steps], I64)
    return node("Slice", names, [out]), inits


def _reflection(left, right, axis=3, shape=(1, 2, 6, 8)):
    """Concat of slices at ``left`` (start, end) pairs, x, slices at ``right``."""
    nodes, inits, parts = [], {}, []
    for k, (s, e) in enumerate(left):
        n, i = _slice("x", s, e, axis, f"l{k}")
        nodes.append(n)
        inits.update(i)
        parts.append(f"l{k}")
    parts.append("x")
    for k, (s, e) in enumerate(right):
        n, i = _slice("x", s, e, axis, f"r{k}")
        nodes.append(n)
        inits.update(i)
        parts.append(f"r{k}")
    nodes.append(node("Concat", parts, ["y"], axis=axis))
    return model(nodes, {"x": (F32, list(shape))}, {"y": (F32, None)}, inits)


@pytest.mark.parametrize(
    "left, right, axis",
    [
        ([(1, 2)], [(-2, -1)], 3),  # the catalog's example
        ([(2, 3), (1, 2)], [(4, 5), (3, 4)], 2),  # two on each side of an extent-6 axis
        ([], [(6, 7)], -1),
        ([(1, 2)], [], 2),
    ],
)
def test_slices_around_x_are_a_reflect_pad(left, right, axis):
    out = check(_reflection(left, right, axis), REFLECT, {"x": rand(1, 2, 6, 8)}, rtol=0, atol=0)
    assert op_types(out) == {"Pad": 1}
    (pad,) = out.main.body.operations
    assert pad.attributes["mode"] == "reflect"


def test_edge_or_wrong_order_slices_stay():
    for left, right in [
        ([(0, 1)], [(-1, None)]),  # edge padding, not reflection
        ([(1, 2), (2, 3)], []),  # reflected the wrong way round
        ([(1, 3)], []),  # two elements in one slice
    ]:
        right = [(s, 8 if e is None else e) for s, e in right]
        _original, out = optimized(_reflection(left, right), REFLECT)
        assert "Pad" not in op_types(out)


# ---- fuse_onehot_matmul_to_gather -------------------------------------------------------------


def _onehot_matmul(values=(0.0, 1.0), depth=10, table=None, indices_type=TensorProto.INT64, axis=-1):
    table = rand(depth, 4, seed=9) if table is None else table
    return model(
        [node("OneHot", ["i", "d", "v"], ["h"], axis=axis), node("MatMul", ["h", "w"], ["y"])],
        {"i": (indices_type, [2, 3])},
        {"y": (F32, None)},
        {
            "d": np.array(depth, np.int32 if indices_type == TensorProto.INT32 else I64),
            "v": np.array(values, np.float32),
            "w": table,
        },
    )


@pytest.mark.parametrize("dtype, np_dtype", [(TensorProto.INT64, np.int64), (TensorProto.INT32, np.int32)])
def test_onehot_times_a_table_is_a_gather_out_of_range_rows_included(dtype, np_dtype):
    # in range, negative in range (from the end) and out of range both ways: zero rows
    i = np.array([[0, 9, -1], [-10, 10, -11]], np_dtype)
    out = check(_onehot_matmul(indices_type=dtype), GATHER, {"i": i}, rtol=0, atol=0)
    assert op_types(out)["Gather"] == 1 and "OneHot" not in op_types(out) and "MatMul" not in op_types(out)


def test_other_values_axis_or_non_finite_table_stay():
    table = rand(10, 4, seed=9)
    table[3, 1] = np.inf
    for data in [
        _onehot_matmul(values=(0.0, 2.0)),
        _onehot_matmul(axis=0),
        _onehot_matmul(table=table),
    ]:
        _original, out = optimized(data, GATHER)
        assert op_types(out) == {"OneHot": 1, "MatMul": 1}
