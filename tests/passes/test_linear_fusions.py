"""optimize_linear::fuse_matmul_weight_bias, fuse_linear_bias, fuse_transpose_matmul."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

MATMUL_BIAS = ["optimize_linear::fuse_matmul_weight_bias"]
LINEAR_BIAS = ["optimize_linear::fuse_linear_bias"]
TRANSPOSE = ["optimize_linear::fuse_transpose_matmul"]
X = {"x": rand(4, 5, seed=3)}


def _matmul_then(
    op, c, *, weight_first=False, const_first=False, x_shape=(4, 5), w_input=False, other_reader=False
):
    w = rand(*((4, 4) if weight_first else (x_shape[-1], 3)), seed=1)
    nodes = [
        node("MatMul", ["w", "x"] if weight_first else ["x", "w"], ["p"]),
        node(op, ["c", "p"] if const_first else ["p", "c"], ["y"]),
    ]
    inputs = {"x": (F32, list(x_shape))}
    inits = {"w": w, "c": c}
    if w_input:
        del inits["w"]
        inputs["w"] = (F32, list(w.shape))
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Neg", ["p"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize(
    "op, c, kw",
    [
        ("Add", rand(3, seed=2), {}),
        ("Add", rand(4, 3, seed=2), {"const_first": True}),
        ("Sub", rand(1, 3, seed=2), {}),
        ("Sub", rand(3, seed=2), {"const_first": True}),
        ("Add", rand(4, 1, seed=2), {"weight_first": True}),
    ],
)
def test_matmul_and_bias_become_one_gemm(op, c, kw):
    out = check(_matmul_then(op, c, **kw), MATMUL_BIAS, X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Gemm": 1}


@pytest.mark.parametrize(
    "c, kw",
    [
        (rand(3, seed=2), {"x_shape": (2, 4, 5)}),  # batched: Gemm is 2-D only
        (rand(3, seed=2), {"w_input": True}),  # no constant weight
        (rand(3, seed=2), {"other_reader": True}),
        (rand(2, 4, 3, seed=2), {}),  # the bias broadcasts the product to 3-D
    ],
)
def test_matmul_bias_does_not_fire(c, kw):
    feeds = {"x": rand(*kw.get("x_shape", (4, 5)), seed=3)}
    if kw.get("w_input"):
        feeds["w"] = rand(5, 3, seed=1)
    out = check(_matmul_then("Add", c, **kw), MATMUL_BIAS, feeds, rtol=1e-5, atol=1e-5)
    assert "Gemm" not in op_types(out)


def _gemm_then(op, c, *, const_first=False, gemm_c=True, alpha=1.0, beta=1.0, c_input=False):
    gemm_in = ["x", "w", "b"] if gemm_c else ["x", "w"]
    inits = {"w": rand(3, 5, seed=1), "c": c, "b": rand(3, seed=4)}
    inputs = {"x": (F32, [4, 5])}
    if c_input:
        del inits["b"]
        inputs["b"] = (F32, [3])
    nodes = [
        node("Gemm", gemm_in, ["g"], transB=1, alpha=alpha, beta=beta),
        node(op, ["c", "g"] if const_first else ["g", "c"], ["y"]),
    ]
    return model(nodes, inputs, {"y": (F32, None)}, inits)


@pytest.mark.parametrize(
    "op, c, kw",
    [
        ("Add", rand(3, seed=2), {}),
        ("Add", rand(4, 1, seed=2), {"const_first": True, "gemm_c": False}),
        ("Sub", rand(1, 3, seed=2), {"alpha": 0.5, "beta": 2.0}),
        ("Sub", rand(4, 3, seed=2), {"const_first": True, "alpha": 1.5, "beta": 0.25}),
    ],
)
def test_constant_after_gemm_joins_its_bias(op, c, kw):
    out = check(_gemm_then(op, c, **kw), LINEAR_BIAS, X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Gemm": 1}


def test_gemm_with_an_input_bias_or_a_growing_broadcast_stays():
    feeds = dict(X, b=rand(3, seed=4))
    out = check(_gemm_then("Add", rand(3, seed=2), c_input=True), LINEAR_BIAS, feeds, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Gemm": 1, "Add": 1}
    original, out = optimized(_gemm_then("Add", rand(2, 4, 3, seed=2)), LINEAR_BIAS)
    assert op_types(out) == op_types(original)


def _transposed_product(which, *, op="MatMul", x_shape=(5, 4), other_reader=False, perm=None):
    nodes = []
    inputs = {"x": (F32, list(x_shape))}
    inits = {"w": rand(5, 3, seed=1) if which == "a" else rand(3, 4, seed=1)}
    attrs = {} if perm is None else {"perm": perm}
    if which == "a":
        nodes.append(node("Transpose", ["x"], ["t"], **attrs))
        product_in = ["t", "w"]
    else:
        nodes.append(node("Transpose", ["w"], ["t"], **attrs))
        product_in = ["x", "t"]
    extra = {"transA": 1} if op == "Gemm" and which == "b" else {}
    if op == "Gemm" and which == "b":
        inputs["x"] = (F32, [x_shape[1], x_shape[0]])
    nodes.append(node(op, product_in, ["y"], **extra))
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Neg", ["t"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize(
    "which, op, feeds",
    [
        ("a", "MatMul", {"x": rand(5, 4, seed=3)}),
        ("b", "MatMul", {"x": rand(5, 4, seed=3)}),
        ("a", "Gemm", {"x": rand(5, 4, seed=3)}),
        ("b", "Gemm", {"x": rand(4, 5, seed=3)}),
    ],
)
def test_transpose_folds_into_gemm_flags(which, op, feeds):
    out = check(_transposed_product(which, op=op), TRANSPOSE, feeds, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Gemm": 1}


def test_transpose_with_another_reader_or_of_rank_3_stays():
    out = check(
        _transposed_product("a", other_reader=True),
        TRANSPOSE,
        {"x": rand(5, 4, seed=3)},
        rtol=1e-5,
        atol=1e-5,
    )
    assert op_types(out) == {"Transpose": 1, "Gemm": 1, "Neg": 1}
    data = model(
        [node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), node("MatMul", ["t", "w"], ["y"])],
        {"x": (F32, [2, 5, 4])},
        {"y": (F32, None)},
        {"w": rand(5, 3, seed=1)},
    )
    original, out = optimized(data, TRANSPOSE)
    assert op_types(out) == op_types(original)
    np.testing.assert_equal(len(out.main.body.operations), 2)
