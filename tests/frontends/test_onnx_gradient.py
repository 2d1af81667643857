"""ai.onnx.preview.training::Gradient expanded at import (frontends/onnx_gradient.py), against
central finite differences of a numpy float64 forward function (the derivative of sum(y)), and
on the `opencl` backend through the same expansion."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.errors import UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl

RNG = np.random.default_rng(7)
D = TensorProto.DOUBLE


def _model(nodes, inputs, y, xs, zs=(), dtype=D, outputs=None):
    """A graph of ``nodes`` computing ``y``, then Gradient(xs, zs, y); the gradients are outputs."""
    grads = [f"d_{x}" for x in xs]
    lists = {"xs": list(xs), "zs": list(zs)} if zs else {"xs": list(xs)}
    g = helper.make_node("Gradient", [*xs, *zs], grads, domain="ai.onnx.preview.training", y=y, **lists)
    graph = helper.make_graph(
        [*nodes, g],
        "g",
        [helper.make_tensor_value_info(n, dtype, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, dtype, None) for n in (outputs or [y, *grads])],
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]
    )
    return m.SerializeToString()


def _numeric(f, feeds: dict, x: str, eps=1e-6) -> np.ndarray:
    """d sum(f(feeds)) / d feeds[x] by central differences in float64."""
    base = feeds[x].astype(np.float64)
    out = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        hi, lo = base.copy(), base.copy()
        hi[i] += eps
        lo[i] -= eps
        out[i] = (np.sum(f(**{**feeds, x: hi})) - np.sum(f(**{**feeds, x: lo}))) / (2 * eps)
    return out


def _check(nodes, shapes, f, xs, zs=(), feeds=None, dims=None):
    feeds = feeds or {n: RNG.uniform(0.5, 2.0, s) for n, s in shapes.items()}
    program = offload.load(_model(nodes, dims or shapes, "y", xs, zs))
    got = offload.evaluate(program, feeds)
    np.testing.assert_allclose(got["y"], f(**feeds), rtol=1e-12)
    for x in xs:
        assert got[f"d_{x}"].shape == feeds[x].shape
        np.testing.assert_allclose(got[f"d_{x}"], _numeric(f, feeds, x), rtol=1e-6, atol=1e-8, err_msg=x)


N = helper.make_node


@pytest.mark.parametrize(
    "op,fn,sa,sb",
    [
        ("Add", np.add, (3, 4), (4,)),
        ("Add", np.add, (3, 1), (1, 4)),
        ("Sub", np.subtract, (2, 3, 4), (3, 1)),
        ("Mul", np.multiply, (3, 4), (3, 4)),
        ("Mul", np.multiply, (), (2, 3)),
        ("Div", np.divide, (3, 4), (1, 4)),
        ("Div", np.divide, (4,), (2, 3, 4)),
    ],
)
def test_broadcasting_binary_ops(op, fn, sa, sb):
    _check([N(op, ["a", "b"], ["y"])], {"a": sa, "b": sb}, lambda a, b: fn(a, b), ["a", "b"])


def test_broadcasting_with_symbolic_dims():
    """Shapes unknown at import: the broadcast axes are found at run time."""
    shapes = {"a": (3, 4), "b": (3, 1)}
    dims = {"a": ("n", 4), "b": ("n", "m")}
    _check([N("Mul", ["a", "b"], ["y"])], shapes, lambda a, b: a * b, ["a", "b"], dims=dims)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((4,), (4,)),
    ],
)
def test_matmul(sa, sb):
    _check([N("MatMul", ["a", "b"], ["y"])], {"a": sa, "b": sb}, lambda a, b: a @ b, ["a", "b"])


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_a_chain_of_unary_ops_and_sum():
    nodes = [
        N("Sub", ["a", "c"], ["s"]),
        N("Relu", ["s"], ["r"]),
        N("Sigmoid", ["a"], ["g"]),
        N("Tanh", ["r"], ["t"]),
        N("Exp", ["t"], ["e"]),
        N("Log", ["c"], ["l"]),
        N("Neg", ["l"], ["n"]),
        N("Identity", ["n"], ["i"]),
        N("Sqrt", ["c"], ["q"]),
        N("Sum", ["e", "g", "i", "q"], ["y"]),
    ]

    def f(a, c):
        return np.exp(np.tanh(np.maximum(a - c, 0))) + _sigmoid(a) - np.log(c) + np.sqrt(c)

    a = RNG.uniform(-2, 2, (3, 4))
    a[np.abs(a - 1) < 0.1] = 0.3  # keep away from Relu's kink at a - c = 0
    feeds = {"a": a, "c": np.ones((3, 4))}
    _check(nodes, {"a": (3, 4), "c": (3, 4)}, f, ["a", "c"], feeds=feeds)


def test_reshape_transpose_and_a_value_used_twice():
    nodes = [
        N("Transpose", ["a"], ["t"], perm=[2, 0, 1]),
        N("Reshape", ["t", "shape"], ["r"]),
        N("Mul", ["r", "r"], ["m"]),
        N("MatMul", ["m", "w"], ["y"]),
    ]
    shape = helper.make_node(
        "Constant", [], ["shape"], value=helper.make_tensor("v", TensorProto.INT64, [2], [4, 6])
    )

    def f(a, w):
        r = np.transpose(a, (2, 0, 1)).reshape(4, 6)
        return (r * r) @ w

    _check([shape, *nodes], {"a": (2, 3, 4), "w": (6, 2)}, f, ["a", "w"])


def test_an_intermediate_x_and_a_held_z():
    """dy/dh for h = a * b; b listed in zs is held constant, so dy/da goes through h only."""
    nodes = [N("Mul", ["a", "b"], ["h"]), N("Tanh", ["h"], ["t"]), N("Mul", ["t", "a"], ["y"])]
    feeds = {"a": RNG.uniform(0.5, 1, (3,)), "b": RNG.uniform(0.5, 1, (3,))}
    program = offload.load(_model(nodes, {"a": (3,), "b": (3,)}, "y", ["h", "a"], ["b"]))
    got = offload.evaluate(program, feeds)
    a, b = feeds["a"], feeds["b"]
    h = a * b
    np.testing.assert_allclose(got["d_h"], (1 - np.tanh(h) ** 2) * a, rtol=1e-12)
    np.testing.assert_allclose(got["d_a"], _numeric(lambda a, b: np.tanh(a * b) * a, feeds, "a"), rtol=1e-6)


def test_an_x_that_y_does_not_depend_on_gets_zeros():
    program = offload.load(_model([N("Exp", ["a"], ["y"])], {"a": (2,), "b": (2, 3)}, "y", ["a", "b"]))
    got = offload.evaluate(program, {"a": np.array([0.0, 1.0]), "b": np.ones((2, 3))})
    np.testing.assert_allclose(got["d_a"], np.exp([0.0, 1.0]), rtol=1e-12)
    np.testing.assert_array_equal(got["d_b"], np.zeros((2, 3)))


def test_an_op_without_a_derivative_is_refused_by_name():
    model = _model([N("Softmax", ["a"], ["s"]), N("Mul", ["s", "a"], ["y"])], {"a": (2, 3)}, "y", ["a"])
    with pytest.raises(UnsupportedOpError, match="Softmax"):
        offload.load(model)


def test_a_y_not_computed_before_the_node_is_refused():
    g = helper.make_node("Gradient", ["a"], ["d_a"], domain="ai.onnx.preview.training", xs=["a"], y="y")
    graph = helper.make_graph(
        [g, N("Exp", ["a"], ["y"])],
        "g",
        [helper.make_tensor_value_info("a", D, (2,))],
        [helper.make_tensor_value_info("d_a", D, None), helper.make_tensor_value_info("y", D, None)],
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]
    )
    with pytest.raises(UnsupportedOpError, match="'y', which the graph does not compute before this node"):
        offload.load(m.SerializeToString())


def test_an_integer_x_is_refused():
    model = _model([N("Add", ["a", "a"], ["y"])], {"a": (2,)}, "y", ["a"], dtype=TensorProto.INT64)
    with pytest.raises(UnsupportedOpError, match="not a float tensor"):
        offload.load(model)


@needs_opencl
def test_the_expansion_runs_on_opencl(tmp_path):
    nodes = [N("MatMul", ["a", "w"], ["m"]), N("Add", ["m", "b"], ["s"]), N("Sigmoid", ["s"], ["y"])]
    shapes = {"a": (4, 3), "w": (3, 5), "b": (5,)}
    model = _model(nodes, shapes, "y", ["w", "b"], dtype=TensorProto.FLOAT)
    feeds = {n: RNG.uniform(-1, 1, s).astype(np.float32) for n, s in shapes.items()}
    _, got = run_on_opencl(offload.load(model), feeds, tmp_path, passes="default")

    def f(a, w, b):
        return _sigmoid(a @ w + b)

    f64 = {k: v.astype(np.float64) for k, v in feeds.items()}
    for x in ("w", "b"):
        np.testing.assert_allclose(got[f"d_{x}"], _numeric(f, f64, x), rtol=1e-4, atol=1e-5)
