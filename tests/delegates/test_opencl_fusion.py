"""The `opencl` backend's elementwise fusion: trees of elementwise ops run as one generated kernel."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

from offload.delegates.opencl.runtime import OpenCLRuntime

from .opencl_support import check, device_kind, model, needs_opencl, plan_and_handle, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(2)


def _x(shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _chain():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["s"]),
        helper.make_node("Mul", ["s", "c"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["y"]),
    ]
    return model(nodes, [("x", [2, 3, 4]), ("b", [3, 1]), ("c", [4])], ["y"])


def test_chain_is_one_launch(tmp_path):
    p = _chain()
    check(p, {"x": _x((2, 3, 4)), "b": _x((3, 1)), "c": _x((4,))}, tmp_path, whole=True)
    plan, h = plan_and_handle(p)
    assert [op["type"] for op in plan["ops"]] == ["Fused"]
    assert len(specialized(h).launches) == 1
    # the intermediates have no value id, hence no device buffer
    assert len(specialized(h).buffers) == 4
    OpenCLRuntime().destroy(h)


def test_tree_with_broadcast_constants_and_clip(tmp_path):
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Tanh", ["z"], ["t"]),
        helper.make_node("Sub", ["e", "t"], ["d"]),  # two fused subtrees meet
        helper.make_node("Div", ["d", "k"], ["q"]),
        helper.make_node("LeakyRelu", ["q"], ["l"], alpha=0.2),
        helper.make_node("Max", ["l", "x"], ["mx"]),  # x read twice: one leaf
        helper.make_node("Clip", ["mx", "", "hi"], ["y"]),  # absent min
    ]
    init = [("k", np.array([1.5, -2.0, 4.0], np.float32)), ("hi", np.array(1.25, np.float32))]
    p = model(nodes, [("x", [2, 1, 3]), ("z", [4, 1])], ["y"], init)
    plan, h = plan_and_handle(p)
    (step,) = plan["ops"]
    assert step["type"] == "Fused" and len(step["nodes"]) == 7 and len(step["inputs"]) == 4
    assert len(specialized(h).launches) == 1
    OpenCLRuntime().destroy(h)
    check(p, {"x": _x((2, 1, 3)), "z": _x((4, 1))}, tmp_path, whole=True)


def test_value_used_outside_the_group_is_materialized(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Neg", ["r"], ["n"]),
        helper.make_node("Abs", ["n"], ["a"]),  # n: also read by Mul below
        helper.make_node("Mul", ["a", "n"], ["y"]),
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Add", ["e", "x"], ["z"]),
    ]
    p = model(nodes, [("x", [3, 5])], ["y", "z", "e"])  # e: a partition output
    check(p, {"x": _x((3, 5))}, tmp_path, whole=True)
    plan, h = plan_and_handle(p)
    kinds = [(op["type"], len(op.get("nodes", [op]))) for op in plan["ops"]]
    # Relu+Neg fuse (n materialized), Abs+Mul fuse, Exp alone (e is an output), Add alone
    assert kinds == [("Fused", 2), ("Fused", 2), ("Exp", 1), ("Add", 1)]
    assert len(specialized(h).launches) == 4
    OpenCLRuntime().destroy(h)


def test_fusion_never_crosses_matmul_or_conv(tmp_path):
    w = (RNG.integers(-2, 3, (2, 2, 3, 3)) / 2).astype(np.float32)
    m = (RNG.integers(-2, 3, (4, 3)) / 2).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Neg", ["r"], ["n"]),
        helper.make_node("Conv", ["n", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Abs", ["s"], ["a"]),
        helper.make_node("MatMul", ["a", "m"], ["mm"]),
        helper.make_node("Tanh", ["mm"], ["t"]),
        helper.make_node("Add", ["t", "mm"], ["y"]),
    ]
    p = model(nodes, [("x", [1, 2, 4, 4])], ["y"], [("w", w), ("m", m)])
    check(p, {"x": _x((1, 2, 4, 4))}, tmp_path, rtol=1e-4, atol=1e-5, whole=True)
    plan, h = plan_and_handle(p)
    kinds = [(op["type"], len(op.get("nodes", [op]))) for op in plan["ops"]]
    # mm is read twice (Tanh, Add): materialized by MatMul, a leaf of the Tanh+Add kernel
    assert kinds == [("Fused", 2), ("Conv", 1), ("Fused", 2), ("MatMul", 1), ("Fused", 2)]
    assert plan["ops"][-1]["inputs"] == plan["ops"][3]["outputs"]
    # 3 fused + Conv (im2col_packed + GEMM on a CPU device) + MatMul batched over 1x2
    assert len(specialized(h).launches) == (7 if device_kind() == "cpu" else 6)
    OpenCLRuntime().destroy(h)


def test_fused_source_is_deterministic():
    from offload.delegates.gpu.ops.elementwise import fused_source

    plan, h = plan_and_handle(_chain())
    OpenCLRuntime().destroy(h)
    (step,) = plan["ops"]
    leaves = ["float32"] * 3
    src = fused_source(step["nodes"], leaves, "float32")
    assert src == fused_source(json.loads(json.dumps(step))["nodes"], leaves, "float32")
    # the dtypes are part of the source: an int32 leaf changes it
    int_src = fused_source(
        [{"type": "Cast", "name": "c", "attributes": {"to": 1}, "args": [["in", 0]]}], ["int32"], "float32"
    )
    assert "__global const int* a0" in int_src and "(float)x0" in int_src


# ---- Transpose and Concat -------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((3, 4), None),
        ((2, 3, 4), [1, 2, 0]),
        ((2, 1, 3, 4), [3, 0, 2, 1]),
        ((2, 3, 1, 2, 3, 2), [5, 3, 1, 0, 4, 2]),
        ((5,), [0]),
    ],
)
def test_transpose(shape, perm, tmp_path):
    attrs = {} if perm is None else {"perm": perm}
    p = model([helper.make_node("Transpose", ["x"], ["y"], **attrs)], [("x", list(shape))], ["y"])
    check(p, {"x": _x(shape)}, tmp_path, rtol=0, atol=0, whole=True)


@pytest.mark.parametrize(
    "shapes,axis",
    [
        ([(2, 3), (4, 3)], 0),
        ([(2, 3), (2, 1), (2, 5)], 1),
        ([(2, 3, 4), (2, 2, 4)], -2),
        ([(1, 2, 3, 2), (1, 2, 3, 1), (1, 2, 3, 3)], 3),
        ([(3,), (0,), (2,)], 0),
    ],
)
def test_concat(shapes, axis, tmp_path):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Concat", names, ["y"], axis=axis)
    p = model([node], [(n, list(s)) for n, s in zip(names, shapes)], ["y"])
    check(p, {n: _x(s) for n, s in zip(names, shapes)}, tmp_path, rtol=0, atol=0, whole=True)


def test_concat_with_constant_and_transpose_then_fused(tmp_path):
    c = _x((2, 3))
    nodes = [
        helper.make_node("Concat", ["x", "c"], ["cat"], axis=0),
        helper.make_node("Transpose", ["cat"], ["t"], perm=[1, 0]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Mul", ["r", "t"], ["y"]),
    ]
    p = model(nodes, [("x", [4, 3])], ["y"], [("c", c)])
    check(p, {"x": _x((4, 3))}, tmp_path, whole=True)


def test_collapsed_dims_index_leaves_flat_scalar_or_by_table():
    """Dims that every leaf steps through as one merge; a leaf laid out as the output reads at the
    work-item's own index, a one-element leaf at 0, a broadcast one through its strides."""
    from offload.delegates.gpu.ops.elementwise import collapse

    # x + per-channel bias + scalar over N x C x H x W: (C, H*W) once merged
    shape, strides, kinds = collapse((1, 64, 7, 7), [[0, 49, 7, 1], [0, 1, 0, 0], [0, 0, 0, 0]])
    assert (shape, strides, kinds) == ([64, 49], [[49, 1], [1, 0], [0, 0]], ("flat", "table", "scalar"))
    # a transposed leaf merges nothing
    assert collapse((2, 3, 4), [[1, 2, 6]]) == ([2, 3, 4], [[1, 2, 6]], ("table",))
