"""The `opencl` backend's elementwise kernels on the narrow and unsigned integer types (int8,
int16, uint8 … uint64), bitwise ops and BitShift, on PoCL against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates import registry

from .opencl_support import check, model, needs_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(11)
SMALL = [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]


def _ints(dtype, shape, lo=None, hi=None):
    """Values over the whole range of ``dtype`` (so sums and products wrap)."""
    info = np.iinfo(dtype)
    lo = max(info.min, -(2**40)) if lo is None else lo
    hi = min(info.max, 2**40) if hi is None else hi
    return RNG.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64 if lo < 0 else np.uint64).astype(
        dtype
    )


def _binary(op, dtype, out=None, **attrs):
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    return model([node], [("a", [3, 4], dtype), ("b", [4], dtype)], [("y", out or dtype)])


@pytest.mark.parametrize("dtype", SMALL)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_wrapping_arithmetic(op, dtype, tmp_path):
    check(_binary(op, dtype), {"a": _ints(dtype, (3, 4)), "b": _ints(dtype, (4,))}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", SMALL)
@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})])
def test_division(op, attrs, dtype, tmp_path):
    a, b = _ints(dtype, (3, 4)), _ints(dtype, (4,))
    b[b == 0] = 3  # division by zero is undefined (onnxruntime traps)
    if np.issubdtype(dtype, np.signedinteger):
        b[0] = -1  # the signed guard
        a[0, 0] = np.iinfo(dtype).min + 1
    else:
        b[1] = np.iinfo(dtype).max  # no -1 for an unsigned divisor to be confused with
        a[0, 1] = np.iinfo(dtype).max
    check(_binary(op, dtype, **attrs), {"a": a, "b": b}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op, dtype, tmp_path):
    a = _ints(dtype, (3, 4), 0, 5)
    b = _ints(dtype, (4,), 0, 5)
    check(_binary(op, dtype, out=np.bool_), {"a": a, "b": b}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])  # onnxruntime's types
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min(op, dtype, tmp_path):
    node = helper.make_node(op, ["a", "b", "c"], ["y"])
    p = model([node], [("a", [3, 4], dtype), ("b", [4], dtype), ("c", [3, 1], dtype)], [("y", dtype)])
    feeds = {"a": _ints(dtype, (3, 4)), "b": _ints(dtype, (4,)), "c": _ints(dtype, (3, 1))}
    check(p, feeds, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", SMALL)
def test_abs_sign(dtype, tmp_path):
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sign", ["x"], ["s"])]
    p = model(nodes, [("x", [5, 7], dtype)], [("a", dtype), ("s", dtype)])
    x = _ints(dtype, (5, 7))
    x[0, :2] = [0, np.iinfo(dtype).max]
    check(p, {"x": x}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint32, np.uint64])  # onnxruntime's types
def test_clip(dtype, tmp_path):
    info = np.iinfo(dtype)
    lo, hi = np.array(info.min // 2 + 3, dtype), np.array(info.max // 2, dtype)
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Clip", ["x", "", "hi"], ["d"]),
        helper.make_node("Clip", ["x", "lo"], ["e"]),
    ]
    p = model(
        nodes, [("x", [5, 7], dtype), ("lo", [], dtype), ("hi", [], dtype)], [(n, dtype) for n in "cde"]
    )
    check(p, {"x": _ints(dtype, (5, 7)), "lo": lo, "hi": hi}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_neg(dtype, tmp_path):
    p = model([helper.make_node("Neg", ["x"], ["y"])], [("x", [9], dtype)], [("y", dtype)])
    check(p, {"x": _ints(dtype, (9,))}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [*SMALL, np.int32, np.int64])
def test_bitwise(dtype, tmp_path):
    nodes = [
        helper.make_node("BitwiseAnd", ["a", "b"], ["and"]),
        helper.make_node("BitwiseOr", ["a", "b"], ["or"]),
        helper.make_node("BitwiseXor", ["a", "b"], ["xor"]),
        helper.make_node("BitwiseNot", ["a"], ["not"]),
    ]
    p = model(
        nodes, [("a", [3, 4], dtype), ("b", [4], dtype)], [(n, dtype) for n in ("and", "or", "xor", "not")]
    )
    check(p, {"a": _ints(dtype, (3, 4)), "b": _ints(dtype, (4,))}, tmp_path, whole=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(direction, dtype, tmp_path):
    width = np.iinfo(dtype).bits
    x = _ints(dtype, (2, width))
    x[0] = np.iinfo(dtype).max
    shift = np.arange(width, dtype=dtype)  # every shift below the width: bits fall off both ends
    check(_binary_shift(direction, dtype, width), {"a": x, "b": shift}, tmp_path, whole=True)


def _binary_shift(direction, dtype, width):
    node = helper.make_node("BitShift", ["a", "b"], ["y"], direction=direction)
    return model([node], [("a", [2, width], dtype), ("b", [width], dtype)], [("y", dtype)])


def test_fused_tree_of_narrow_types(tmp_path):
    # uint8 arithmetic, a comparison, Where and a Cast in one generated kernel
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["m"]),
        helper.make_node("Greater", ["m", "b"], ["g"]),
        helper.make_node("Where", ["g", "m", "b"], ["w"]),
        helper.make_node("BitwiseXor", ["w", "a"], ["y"]),
    ]
    p = model(nodes, [("a", [4, 6], np.uint8), ("b", [6], np.uint8)], [("y", np.uint8)])
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert [o.op_type for o in lowered.main.body.operations] == ["Delegate"]
    check(p, {"a": _ints(np.uint8, (4, 6)), "b": _ints(np.uint8, (6,))}, tmp_path, whole=True)


@pytest.mark.parametrize(
    "op,dtype,out,reason",
    [
        ("Cast", np.float32, np.uint8, "Cast"),  # out-of-range floats have no defined conversion
        ("Neg", np.uint8, np.uint8, "Neg"),  # ONNX's Neg takes no unsigned type
        ("Sum", np.int8, np.int8, "Sum"),
    ],
)
def test_refusals(op, dtype, out, reason):
    attrs = {"to": helper.np_dtype_to_tensor_dtype(np.dtype(out))} if op == "Cast" else {}
    p = model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [3], dtype)], [("y", out)])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert (not support and reason in support.reason) or "dtype" in support.reason
