"""The `opencl` backend's typed elementwise ops on PoCL, each case one whole delegate against
onnxruntime: every claimed op and dtype, attributes, broadcasting, NaN / ±inf, mixed-type fused
trees, and dtypes left on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.delegates.opencl.runtime import OpenCLRuntime

from .opencl_support import check, model, needs_opencl, plan_and_handle, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(3)
EXACT = {"rtol": 0, "atol": 0, "whole": True}
SIMPLE = {"rtol": 1e-5, "atol": 1e-6, "whole": True}
# onnxruntime's erf, tanh, pow and hyperbolic functions are its own (MLAS / Eigen
# approximations, or double-precision std::pow), not PoCL's libm: a few ulp apart.
LIBM = {"rtol": 1e-4, "atol": 1e-6, "whole": True}
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 3.0], np.float32)
DTYPES = [np.float32, np.int32, np.int64]


def _f(shape, scale=3.0):
    return np.asarray(RNG.standard_normal(shape) * scale, np.float32)


def _ints(shape, dtype, lo=-20, hi=21):
    return np.asarray(RNG.integers(lo, hi, shape), dtype)


def _values(shape, dtype):
    return _f(shape) if dtype == np.float32 else _ints(shape, dtype)


def _one(op, inputs, out_dtype=np.float32, **attrs):
    """A model of one node; ``inputs`` are (name, array) (an empty name: an absent input)."""
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    graph_inputs = [(n, list(a.shape), a.dtype) for n, a in inputs if n]
    return model([node], graph_inputs, [("y", out_dtype)]), {n: a for n, a in inputs if n}


def _delegated(program) -> bool:
    lowered = offload.to_backend(program, "opencl", passes="none")
    return any(op.op_type == "Delegate" for op in lowered.main.body.operations)


# ---- float32 unary ops -----------------------------------------------------------------------

# op → input range (low, high); ops with a domain get inputs inside it
_UNARY = {
    "Relu": None,
    "Sigmoid": None,
    "HardSwish": None,
    "Softplus": None,
    "Softsign": None,
    "Exp": None,
    "Abs": None,
    "Neg": None,
    "Sign": None,
    "Reciprocal": None,
    "Floor": None,
    "Ceil": None,
    "Round": None,
    "Sin": None,
    "Cos": None,
    "Atan": None,
    "Log": (0.01, 50.0),
    "Sqrt": (0.0, 50.0),
    "Tan": (-1.2, 1.2),
    "Asin": (-1.0, 1.0),
    "Acos": (-1.0, 1.0),
    "Atanh": (-0.99, 0.99),
    "Acosh": (1.0, 30.0),
}
_UNARY_LIBM = ("Tanh", "Erf", "Mish", "Sinh", "Cosh", "Asinh")


@pytest.mark.parametrize("op", [*_UNARY, *_UNARY_LIBM])
def test_float_unary(op, tmp_path):
    span = _UNARY.get(op)
    if span is None:
        x = _f((3, 4, 5))
    else:
        x = RNG.uniform(*span, (3, 4, 5)).astype(np.float32)
    if op == "Round":  # ties, both parities, and both signs
        x = np.concatenate([x.ravel()[:-10], [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e7 + 0.5, 0.49999997, 7, -8]])
        x = x.astype(np.float32).reshape(3, 4, 5)
    if op in ("Sinh", "Cosh"):
        x = np.clip(x, -9, 9)
    p, feeds = _one(op, [("x", x)])
    check(p, feeds, tmp_path, **(LIBM if op in _UNARY_LIBM else SIMPLE))


@pytest.mark.parametrize(
    "op",
    [
        "Relu",
        "Sigmoid",
        "HardSwish",
        "Softplus",
        "Mish",
        "Abs",
        "Neg",
        "Sign",
        "Floor",
        "Ceil",
        "Round",
        "Exp",
    ],
)
def test_float_unary_nan_and_inf(op, tmp_path):
    p, feeds = _one(op, [("x", SPECIAL)])
    check(p, feeds, tmp_path, **LIBM)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("LeakyRelu", {}),
        ("LeakyRelu", {"alpha": 0.3}),
        ("HardSigmoid", {}),
        ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}),
        ("Elu", {}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Selu", {"alpha": 1.5, "gamma": 2.0}),
        ("Celu", {}),
        ("Celu", {"alpha": 2.0}),
        ("ThresholdedRelu", {}),
        ("ThresholdedRelu", {"alpha": -0.5}),
        ("Gelu", {}),
        ("Gelu", {"approximate": "none"}),
        ("Gelu", {"approximate": "tanh"}),
    ],
)
def test_float_unary_with_attributes(op, attrs, tmp_path):
    x = np.concatenate([_f((37,)), SPECIAL])
    p, feeds = _one(op, [("x", x)], **attrs)
    check(p, feeds, tmp_path, **(LIBM if op == "Gelu" else SIMPLE))


@pytest.mark.parametrize(
    "attrs",
    [{}, {"detect_positive": 0}, {"detect_negative": 0}, {"detect_positive": 0, "detect_negative": 0}],
)
def test_isinf_and_isnan(attrs, tmp_path):
    x = np.concatenate([_f((6,)), SPECIAL]).reshape(2, 8)
    p, feeds = _one("IsInf", [("x", x)], np.bool_, **attrs)
    check(p, feeds, tmp_path, **EXACT)
    p, feeds = _one("IsNaN", [("x", x)], np.bool_)
    check(p, feeds, tmp_path, **EXACT)


# ---- binary arithmetic over every dtype, with broadcasting ------------------------------------

_SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((2, 0, 3), (1, 3)),
    ((1, 2, 1, 1, 3, 1), (2, 1, 4, 1, 5)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("sa,sb", _SHAPES)
def test_binary(op, dtype, sa, sb, tmp_path):
    a, b = _values(sa, dtype), _values(sb, dtype)
    if op == "Div":  # integer Div truncates toward zero: negative operands on both sides
        b = np.where(np.abs(b) < 1, 3, b).astype(dtype)
    p, feeds = _one(op, [("a", a), ("b", b)], dtype)
    check(p, feeds, tmp_path, **(SIMPLE if dtype == np.float32 else EXACT))


def test_integer_arithmetic_wraps_and_is_exact_beyond_float(tmp_path):
    a = np.array([2**40 + 3, -(2**40) - 7, 2**62, -5, 9], np.int64)
    b = np.array([2**33 + 1, 3, 2, 2, -4], np.int64)
    for op in ("Add", "Sub", "Mul", "Div", "Max"):
        p, feeds = _one(op, [("a", a), ("b", b)], np.int64)
        check(p, feeds, tmp_path, **EXACT)


def test_max_min_propagate_nan(tmp_path):
    a = np.tile(SPECIAL, (10, 1))
    b = np.tile(SPECIAL[:, None], (1, 10))
    for op in ("Max", "Min"):
        p, feeds = _one(op, [("a", a), ("b", b)])
        check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(dtype, fmod, tmp_path):
    a = _values((4, 6), dtype) * (7 if dtype != np.float32 else 1)
    b = _values((6,), dtype)
    b = np.where(b == 0, 3, b).astype(dtype)
    p, feeds = _one("Mod", [("a", a), ("b", b)], dtype, fmod=fmod)
    if dtype == np.float32 and fmod == 0:  # ONNX takes float Mod with fmod=1 only
        assert not _delegated(p)
        return
    check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("edtype", DTYPES)
def test_pow(edtype, tmp_path):
    base = (
        np.concatenate([RNG.uniform(0.1, 4, (12,)), [-2.0, -3.0, -0.5, 0.0]]).astype(np.float32).reshape(4, 4)
    )
    if edtype == np.float32:
        e = np.array([2.0, 3.0, -1.0, 0.5], np.float32)  # fractional only where the base is ≥ 0 ...
        base[:, 3] = np.abs(base[:, 3])  # ... so no NaN from a negative base
    else:
        e = np.array([2, 3, -1, 0], edtype)
    p, feeds = _one("Pow", [("x", base), ("e", e)])
    check(p, feeds, tmp_path, **LIBM)


# ---- variadic ops ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,dtype",
    [
        ("Max", np.float32),
        ("Min", np.float32),
        ("Sum", np.float32),
        ("Mean", np.float32),
        ("Max", np.int32),
        ("Min", np.int64),
    ],
)
@pytest.mark.parametrize(
    "shapes", [[(3, 4)], [(3, 4), (4,), (3, 1)], [(2, 1, 3), (), (4, 1), (1, 4, 3), (3,)]]
)
def test_variadic(op, dtype, shapes, tmp_path):
    inputs = [(f"x{i}", _values(s, dtype)) for i, s in enumerate(shapes)]
    p, feeds = _one(op, inputs, dtype)
    check(p, feeds, tmp_path, **SIMPLE)


def test_variadic_with_many_inputs(tmp_path):
    inputs = [(f"x{i}", _f((2, 3) if i % 2 else (3,))) for i in range(12)]
    for op in ("Max", "Sum", "Mean"):
        p, feeds = _one(op, inputs)
        check(p, feeds, tmp_path, **SIMPLE)


# ---- comparisons, logic, Where ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparison(op, dtype, tmp_path):
    a = _ints((3, 4), dtype, -3, 4)  # small range: many equal pairs
    b = _ints((4,), dtype, -3, 4)
    if dtype == np.float32:
        a[0, :] = SPECIAL[:4]
        b[:2] = [np.nan, np.inf]
    p, feeds = _one(op, [("a", a), ("b", b)], np.bool_)
    check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("op", ["And", "Or", "Xor", "Equal"])
def test_logic(op, tmp_path):
    a = RNG.integers(0, 2, (2, 3, 4)).astype(np.bool_)
    b = RNG.integers(0, 2, (3, 1)).astype(np.bool_)
    p, feeds = _one(op, [("a", a), ("b", b)], np.bool_)
    check(p, feeds, tmp_path, **EXACT)


def test_not(tmp_path):
    p, feeds = _one("Not", [("a", RNG.integers(0, 2, (5, 2)).astype(np.bool_))], np.bool_)
    check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(dtype, tmp_path):
    c = RNG.integers(0, 2, (2, 1, 4)).astype(np.bool_)
    a, b = _values((3, 4), dtype), _values((3, 1), dtype)
    p, feeds = _one("Where", [("c", c), ("a", a), ("b", b)], dtype)
    check(p, feeds, tmp_path, **EXACT)


# ---- Cast, integer unary ops, Clip ---------------------------------------------------------------

_SOURCES = {
    np.float32: np.array([0.0, -0.0, 1.0, -1.0, 0.4, -0.6, 2.5, -2.5, 1e9, -1e9, 123456.7, 7.9], np.float32),
    np.int32: np.array([0, 1, -1, 2**31 - 1, -(2**31), 5, -7, 16777217, 100, 2, 3, -3], np.int32),
    np.int64: np.array(
        [0, 1, -1, 2**40 + 1, -(2**35), 2**31, -(2**31) - 1, 2**53 + 1, 9, 2, 3, -3], np.int64
    ),
    np.bool_: np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0], np.bool_),
}
_ENUM = {
    np.float32: TensorProto.FLOAT,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
    np.bool_: TensorProto.BOOL,
}


@pytest.mark.parametrize("src", list(_SOURCES))
@pytest.mark.parametrize("dst", list(_SOURCES))
def test_cast(src, dst, tmp_path):
    x = _SOURCES[src]  # float32 sources fit int32 (ONNX leaves out-of-range casts undefined)
    p, feeds = _one("Cast", [("x", x.reshape(3, 4))], dst, to=_ENUM[dst])
    check(p, feeds, tmp_path, **EXACT)


def test_cast_nan_and_inf_to_bool(tmp_path):
    p, feeds = _one("Cast", [("x", SPECIAL)], np.bool_, to=TensorProto.BOOL)
    check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
def test_integer_unary(op, dtype, tmp_path):
    p, feeds = _one(op, [("x", _ints((4, 5), dtype))], dtype)
    check(p, feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bounds", [("lo", "hi"), ("lo",), ("", "hi"), ()])
def test_clip(dtype, bounds, tmp_path):
    x = _values((3, 5), dtype)
    if dtype == np.float32:
        x[0, :4] = SPECIAL[:4]
    values = {"lo": np.array(-4, dtype), "hi": np.array(5, dtype)}
    p, feeds = _one("Clip", [("x", x), *((b, values.get(b)) for b in bounds)], dtype)
    check(p, feeds, tmp_path, **EXACT)


def test_prelu_slope_broadcasts(tmp_path):
    for xs, ss in [((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)), ((5,), ()), ((2, 3), (2, 3))]:
        p, feeds = _one("PRelu", [("x", _f(xs)), ("s", _f(ss, 1.0))])
        check(p, feeds, tmp_path, **SIMPLE)


# ---- fused mixed-type trees -------------------------------------------------------------------


def test_compare_where_mul_cast_is_one_kernel(tmp_path):
    nodes = [
        helper.make_node("Greater", ["x", "t"], ["g"]),
        helper.make_node("Where", ["g", "x", "z"], ["w"]),
        helper.make_node("Mul", ["w", "k"], ["m"]),
        helper.make_node("Cast", ["m"], ["y"], to=TensorProto.INT64),
    ]
    init = [("t", np.array([0.5, -1.0, 2.0], np.float32)), ("k", np.float32(3.5))]
    p = model(nodes, [("x", [2, 4, 3]), ("z", [4, 1])], [("y", np.int64)], init)
    check(p, {"x": _f((2, 4, 3)), "z": _f((4, 1))}, tmp_path, **EXACT)
    plan, h = plan_and_handle(p)
    launches = len(specialized(h).launches)
    OpenCLRuntime().destroy(h)
    (step,) = plan["ops"]
    assert step["type"] == "Fused" and [n["type"] for n in step["nodes"]] == [
        "Greater",
        "Where",
        "Mul",
        "Cast",
    ]
    assert launches == 1


def test_integer_and_bool_tree(tmp_path):
    nodes = [
        helper.make_node("Mod", ["a", "b"], ["m"], fmod=0),
        helper.make_node("Equal", ["m", "zero"], ["e"]),
        helper.make_node("Not", ["e"], ["ne"]),
        helper.make_node("Less", ["a", "b"], ["lt"]),
        helper.make_node("Xor", ["ne", "lt"], ["x"]),
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32),
        helper.make_node("Cast", ["a"], ["ai"], to=TensorProto.INT32),
        helper.make_node("Max", ["xi", "ai", "c"], ["mx"]),
        helper.make_node("Cast", ["mx"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["f", "four"], ["y"]),
    ]
    init = [("zero", np.int64(0)), ("c", np.array([[-3], [2]], np.int32)), ("four", np.float32(4))]
    p = model(nodes, [("a", [2, 5], np.int64), ("b", [5], np.int64)], ["y"], init)
    feeds = {"a": _ints((2, 5), np.int64), "b": np.array([3, -4, 7, -2, 5], np.int64)}
    check(p, feeds, tmp_path, **SIMPLE)
    plan, h = plan_and_handle(p)
    OpenCLRuntime().destroy(h)
    assert [op["type"] for op in plan["ops"]] == ["Fused"]


def test_float_chain_with_activations_fuses(tmp_path):
    nodes = [
        helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
        helper.make_node("HardSigmoid", ["g"], ["h"], alpha=0.3),
        helper.make_node("Pow", ["h", "two"], ["p"]),
        helper.make_node("Sum", ["p", "x", "b"], ["s"]),
        helper.make_node("Clip", ["s", "lo"], ["c"]),
        helper.make_node("IsNaN", ["x"], ["n"]),  # x is a leaf: reading it twice keeps one tree
        helper.make_node("Where", ["n", "b", "c"], ["y"]),
    ]
    init = [("two", np.int32(2)), ("b", _f((4,))), ("lo", np.float32(-1))]
    p = model(nodes, [("x", [3, 4])], ["y"], init)
    x = _f((3, 4))
    x[0, 0] = np.nan
    check(p, {"x": x}, tmp_path, **LIBM)
    plan, h = plan_and_handle(p)
    OpenCLRuntime().destroy(h)
    assert [op["type"] for op in plan["ops"]] == ["Fused"]


# ---- what stays on the CPU ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,inputs,out,attrs",
    [
        ("Add", [("a", np.zeros(3, np.float64)), ("b", np.zeros(3, np.float64))], np.float64, {}),
        ("Pow", [("a", np.zeros(3, np.int32)), ("b", np.zeros(3, np.int32))], np.int32, {}),
        ("Cast", [("a", np.zeros(3, np.float32))], np.float64, {"to": TensorProto.DOUBLE}),
        # a float to int8 is defined in C only inside int8's range: without a Clip it stays
        ("Cast", [("a", np.zeros(3, np.float32))], np.int8, {"to": TensorProto.INT8}),
        ("Relu", [("a", np.zeros(3, np.int32))], np.int32, {}),
        ("Less", [("a", np.zeros(3, np.bool_)), ("b", np.zeros(3, np.bool_))], np.bool_, {}),
        (
            "Where",
            [("c", np.zeros(3, np.bool_)), ("a", np.zeros(3, np.bool_)), ("b", np.zeros(3, np.bool_))],
            np.bool_,
            {},
        ),
        ("Sum", [("a", np.zeros(3, np.int32)), ("b", np.zeros(3, np.int32))], np.int32, {}),
    ],
)
def test_unclaimed_dtypes_stay_on_the_cpu(op, inputs, out, attrs):
    p, _ = _one(op, inputs, out, **attrs)
    assert not _delegated(p)


@needs_opencl
def test_casts_from_int8_and_to_int8_after_a_clip_run_on_opencl(tmp_path):
    """The edges of a quantized model run as float (passes/quantization/integer_as_float.py):
    int8 → float, and a float clamped to int8's range → int8 (C's conversion truncates)."""
    q = np.arange(-128, 128, dtype=np.int8)
    nodes = [
        helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "s"], ["m"]),
        helper.make_node("Clip", ["m", "lo", "hi"], ["c"]),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.INT8),
    ]
    consts = [("s", np.float32(0.7)), ("lo", np.float32(-128)), ("hi", np.float32(127))]
    program = model(nodes, [("q", [256], np.int8)], [("y", np.int8)], consts)
    check(program, {"q": q}, tmp_path, whole=True)
