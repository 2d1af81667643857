"""optimize_activation::fuse_gelu_exact, fuse_gelu_tanh_approximation, fuse_leaky_relu, fuse_prelu."""

import math

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

GELU_EXACT = ["optimize_activation::fuse_gelu_exact"]
GELU_TANH = ["optimize_activation::fuse_gelu_tanh_approximation"]
LEAKY = ["optimize_activation::fuse_leaky_relu"]
PRELU = ["optimize_activation::fuse_prelu"]
X = {"x": rand(2, 8, seed=3) * 3}
SQRT2 = math.sqrt(2)


def _f(v):
    return np.array(v, np.float32)


def _tail(spelling, one_plus, out="y"):
    """The three catalog spellings of 0.5 · x · one_plus."""
    if spelling == "half_last":
        return [node("Mul", ["x", one_plus], ["m"]), node("Mul", ["m", "half"], [out])]
    if spelling == "half_first":
        return [node("Mul", [one_plus, "half"], ["m"]), node("Mul", ["m", "x"], [out])]
    return [node("Mul", ["x", "half"], ["h"]), node("Mul", ["h", one_plus], [out])]


def _gelu_exact(
    spelling="half_last", by="Div", k=SQRT2, one=1.0, extra_reader=None, shape=(2, 8), x_shape=(2, 8)
):
    nodes = [
        node(by, ["x", "k"], ["d"]),
        node("Erf", ["d"], ["e"]),
        node("Add", ["e", "one"], ["a"]),
        *_tail(spelling, "a"),
    ]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    inits = {"k": _f(k), "one": _f(one), "half": np.full(shape, 0.5, np.float32)}
    return model(nodes, {"x": (F32, list(x_shape))}, outputs, inits)


@pytest.mark.parametrize("spelling", ["half_last", "half_first", "half_of_x"])
@pytest.mark.parametrize("by, k", [("Div", math.sqrt(2)), ("Mul", math.sqrt(0.5))])
def test_gelu_exact_fuses(spelling, by, k):
    out = check(_gelu_exact(spelling, by, k), GELU_EXACT, X, rtol=1e-5, atol=1e-6)
    assert op_types(out) == {"Gelu": 1}
    assert out.main.body.operations[0].attributes["approximate"] == "none"


@pytest.mark.parametrize(
    "kw",
    [
        {"k": 1.5},  # not √2
        {"one": 2.0},
        {"extra_reader": "e"},  # erf(x/√2) is read elsewhere
        {"extra_reader": "m", "spelling": "half_first"},
        {"shape": (3, 2, 8)},  # the 0.5 broadcasts the result to a larger shape
    ],
)
def test_gelu_exact_does_not_fire(kw):
    original, out = optimized(_gelu_exact(**kw), GELU_EXACT)
    assert op_types(out) == op_types(original)


def test_gelu_exact_fuses_over_symbolic_dims():
    """x of shape (n, 8): a symbol is one size wherever it appears, so the chain keeps x's shape."""
    data = _gelu_exact(shape=(1, 1), x_shape=("n", 8))
    out = check(data, GELU_EXACT, {"x": rand(5, 8, seed=4) * 3}, rtol=1e-5, atol=1e-6)
    assert op_types(out) == {"Gelu": 1}


def test_gelu_exact_fuses_over_an_unknown_dim():
    """x of shape (?, 8) and one-element constants of no more dims: nothing broadcasts past x's
    shape whatever the unknown dim is (PaddleOCR's convs leave their output width unknown)."""
    data = _gelu_exact(shape=(1, 1), x_shape=(None, 8))
    out = check(data, GELU_EXACT, {"x": rand(5, 8, seed=4) * 3}, rtol=1e-5, atol=1e-6)
    assert op_types(out) == {"Gelu": 1}


@pytest.mark.parametrize("x_shape, shape", [(("n", 8), (3, 1, 8)), ((None, 8), (1, 1, 1))])
def test_gelu_exact_does_not_fire_over_a_broadcast(x_shape, shape):
    """A 0.5 of higher rank broadcasts the result past x's shape."""
    original, out = optimized(_gelu_exact(shape=shape, x_shape=x_shape), GELU_EXACT)
    assert op_types(out) == op_types(original)


def _gelu_tanh(spelling="half_of_x", cube="Pow", c=0.044715, extra_reader=None):
    if cube == "Pow":
        cube_nodes = [node("Pow", ["x", "three"], ["p"])]
    else:
        cube_nodes = [node("Mul", ["x", "x"], ["sq"]), node("Mul", ["sq", "x"], ["p"])]
    nodes = [
        *cube_nodes,
        node("Mul", ["c", "p"], ["q"]),
        node("Add", ["x", "q"], ["s"]),
        node("Mul", ["s", "k"], ["u"]),
        node("Tanh", ["u"], ["t"]),
        node("Add", ["one", "t"], ["a"]),
        *_tail(spelling, "a"),
    ]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    inits = {
        "three": _f(3.0),
        "c": _f(c),
        "k": _f(math.sqrt(2 / math.pi)),
        "one": _f(1.0),
        "half": _f(0.5),
    }
    return model(nodes, {"x": (F32, [2, 8])}, outputs, inits)


@pytest.mark.parametrize("spelling", ["half_last", "half_first", "half_of_x"])
@pytest.mark.parametrize("cube", ["Pow", "Mul"])
def test_gelu_tanh_fuses(spelling, cube):
    out = check(_gelu_tanh(spelling, cube), GELU_TANH, X, rtol=1e-5, atol=1e-6)
    assert op_types(out) == {"Gelu": 1}
    assert out.main.body.operations[0].attributes["approximate"] == "tanh"


@pytest.mark.parametrize("kw", [{"c": 0.05}, {"extra_reader": "t"}, {"extra_reader": "p"}])
def test_gelu_tanh_does_not_fire(kw):
    original, out = optimized(_gelu_tanh(**kw), GELU_TANH)
    assert op_types(out) == op_types(original)


def _leaky(alpha, swap=False, extra_reader=False):
    nodes = [
        node("Mul", ["a", "x"] if swap else ["x", "a"], ["m"]),
        node("Max", ["x", "m"] if swap else ["m", "x"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", ["m"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, [2, 8])}, outputs, {"a": _f(alpha)})


@pytest.mark.parametrize("alpha, swap", [(0.2, False), (0.01, True), (1.0, False), (0.0, True)])
def test_leaky_relu_fuses_bit_for_bit(alpha, swap):
    out = check(_leaky(alpha, swap), LEAKY, X, rtol=0, atol=0)
    assert op_types(out) == {"LeakyRelu": 1}


@pytest.mark.parametrize("alpha, extra", [(1.5, False), (-0.2, False), (0.2, True)])
def test_leaky_relu_does_not_fire(alpha, extra):
    out = check(_leaky(alpha, extra_reader=extra), LEAKY, X, rtol=0, atol=0)
    assert op_types(out)["Max"] == 1 and "LeakyRelu" not in op_types(out)


XC = {"x": rand(1, 4, 3, 3, seed=5)}


def _prelu(a, neg="Neg", swap=False, extra_reader=None):
    neg_nodes = [node("Neg", ["x"], ["n"])] if neg == "Neg" else [node("Mul", ["x", "minus1"], ["n"])]
    nodes = [
        node("Relu", ["x"], ["r"]),
        *neg_nodes,
        node("Relu", ["n"], ["rn"]),
        node("Mul", ["a", "rn"] if swap else ["rn", "a"], ["m"]),
        node("Add", ["m", "r"] if swap else ["r", "m"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, [1, 4, 3, 3])}, outputs, {"a": a, "minus1": _f(-1.0)})


@pytest.mark.parametrize(
    "a, neg, swap",
    [(rand(4, 1, 1, seed=1), "Neg", False), (rand(1, 4, 1, 1, seed=2), "Mul", True), (_f(0.25), "Neg", True)],
)
def test_prelu_fuses_bit_for_bit(a, neg, swap):
    out = check(_prelu(a, neg, swap), PRELU, XC, rtol=0, atol=0)
    assert op_types(out) == {"PRelu": 1}


@pytest.mark.parametrize(
    "a, kw",
    [
        (rand(4, 1, 1, seed=1), {"extra_reader": "rn"}),
        (rand(2, 4, 1, 1, seed=1), {}),  # the slope broadcast grows the batch
        (np.array([1.0, np.inf, 1.0, 1.0], np.float32).reshape(4, 1, 1), {}),  # 0·inf is NaN
    ],
)
def test_prelu_does_not_fire(a, kw):
    original, out = optimized(_prelu(a, **kw), PRELU)
    assert op_types(out) == op_types(original)
