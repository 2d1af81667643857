"""Compile spec precision=fp16 on PoCL: float32 values stored as half, every kernel family.

Under fp16 every float32 value of a partition lives on the device as IEEE half (inputs, weights,
intermediates, outputs) while kernels compute and accumulate in float32. The reference is
onnxruntime in float32, and for whole models onnxruntime on the model with every weight and
every op's result rounded to half as fp16 storage rounds them (``_half_storage``).

Tolerances. Half keeps 11 significant bits: rounding to it errs by at most u = 2^-11 ≈ 4.9e-4
relative. Most cases feed values that half represents exactly (inputs and weights from ``_h``),
so the only errors are the roundings of stored results: a single kernel rounds its output once
(≤ u), and each stored intermediate of a chain adds about u more, amplified by what follows (a
sum of K products of O(1) values errs by about sqrt(K)·u absolutely). Hence TOL1 = 1e-3 (2u)
for one kernel and wider bounds, stated where used, for chains. Where numpy can reproduce the
result bit for bit (data movement, or one correctly rounded float32 op followed by the rounding
to half), the test asks for exact equality.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload import runtime
from offload.delegates.backend import CompileSpecError
from offload.delegates.gpu.ops import linalg
from offload.delegates.opencl.runtime import OpenCLRuntime
from offload.errors import ModelFormatError
from tests.reference import assert_close, onnxruntime_outputs, unit_roundoff

from .opencl_support import (
    conv_kernels,
    device_kind,
    model,
    needs_opencl,
    overflowing,
    reference,
    specialized,
)

pytestmark = needs_opencl
RNG = np.random.default_rng(16)
SPECS = {"opencl": {"precision": "fp16", "mixed": "0"}}  # every float32 value half
TOL1 = {"rtol": 1e-3, "atol": 1e-3}  # one kernel, one rounding to half of an O(1) result (2u)


def _h(shape, scale=1.0, shift=0.0) -> np.ndarray:
    """Normal float32 values that half represents exactly."""
    x = RNG.standard_normal(shape) * scale + shift
    return x.astype(np.float16).astype(np.float32)


def _r(x) -> np.ndarray:
    """``x`` rounded to half (nearest even) and back: what fp16 storage keeps."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def lower(program):
    return offload.to_backend(program, "opencl", compile_specs=SPECS, passes="none")


def run_fp16(program, feeds, tmp_path):
    """Lowered whole to opencl under fp16 → save → load → run: (lowered program, outputs)."""
    lowered = lower(program)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    module = runtime.load(str(path))
    (name,) = module.method_names
    assert [d[:2] for d in module.method(name).delegates] == [("opencl", "backend")]
    return lowered, module.run(feeds)


def check(program, feeds, tmp_path, rtol=1e-3, atol=1e-3, whole=True):
    """fp16 results (float32 to the caller) against onnxruntime in float32."""
    want = reference(program, feeds)
    _, got = run_fp16(program, feeds, tmp_path)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, v.dtype)
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)
    return got


def exact(program, feeds, tmp_path, expected: dict):
    """fp16 results equal ``expected`` bit for bit (NaN where it has NaN)."""
    _, got = run_fp16(program, feeds, tmp_path)
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def handle(program):
    """The plan of ``program`` lowered under fp16 and its OpenCL handle (destroy it after)."""
    lowered = lower(program)
    (delegate,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    blob = delegate.attributes["processed"]
    weights = {n: v.const_value for n, v in delegate.attributes["fallback"].constants.items()}
    return json.loads(blob), OpenCLRuntime().init(blob, [], weights)


def _one(op, inputs, init=(), outputs=("y",), **attrs):
    names = [n for n, *_ in inputs] + [n for n, _ in init]
    return model([helper.make_node(op, names, list(outputs), **attrs)], inputs, list(outputs), init)


# ---- the spec and the plan ----------------------------------------------------------------------


def test_bad_precision_is_refused_at_to_backend():
    p = _one("Relu", [("x", [2, 3])])
    for bad in ("fp8", "FP16", "half", ""):
        with pytest.raises(CompileSpecError, match="precision"):
            offload.to_backend(p, "opencl", compile_specs={"opencl": {"precision": bad}}, passes="none")


def test_plan_records_precision_and_buffers_are_half():
    p = model(
        [
            helper.make_node("Add", ["x", "w"], ["t"]),
            helper.make_node("Cast", ["t"], ["y"], to=TensorProto.INT64),
        ],
        [("x", [3, 5])],
        [("y", np.int64)],
        [("w", _h((5,)))],
    )
    plan, h = handle(p)
    try:
        assert plan["precision"] == "fp16"
        for v, dtype in plan["dtypes"].items():
            n = int(np.prod(plan["shapes"][v]))
            assert specialized(h).buffers[int(v)].size == n * {"float32": 2, "int64": 8}[dtype], (v, dtype)
    finally:
        OpenCLRuntime().destroy(h)
    # fp32 (the default) writes the plan as before: no "precision" key
    lowered = offload.to_backend(p, "opencl", compile_specs={"opencl": {"precision": "fp32"}}, passes="none")
    (delegate,) = lowered.main.body.operations
    assert "precision" not in json.loads(delegate.attributes["processed"])


def test_a_plan_with_another_precision_is_refused_at_init():
    lowered = lower(_one("Relu", [("x", [2, 3])]))
    (delegate,) = lowered.main.body.operations
    plan = json.loads(delegate.attributes["processed"])
    plan["precision"] = "fp8"
    with pytest.raises(ModelFormatError, match="precision"):
        OpenCLRuntime().init(json.dumps(plan).encode(), [], {})


def test_storage_rounds_to_nearest_even_and_overflows_to_inf(tmp_path):
    # Identity-like copies: the values come back as half keeps them (ties to even, ±inf past
    # 65504, NaN stays NaN, subnormals kept).
    x = np.array(
        [1 + 2**-11, 1 + 3 * 2**-11, 65504, 65520, -1e6, 2**-24, 2**-25, 0.1, np.nan, -0.0], np.float32
    ).reshape(2, 5)
    p = _one("Transpose", [("x", [2, 5])], perm=[1, 0])
    exact(p, {"x": x}, tmp_path, {"y": _r(x).T})


# ---- elementwise --------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Max", "Min"])
def test_binary_op_is_float32_math_rounded_once(op, tmp_path):
    # any float32 inputs: rounded to half on the way in, the op in float32 (correctly rounded on
    # PoCL), the result rounded to half: numpy does exactly the same
    a, b = RNG.standard_normal((4, 6)).astype(np.float32), RNG.standard_normal((6,)).astype(np.float32) * 3
    a[0, 0] = np.nan
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.fmax, "Min": np.fmin}[op]
    want = fn(_r(a), _r(b))
    if op in ("Max", "Min"):
        want[0, 0] = np.nan  # NaN propagates, like numpy's maximum
    p = _one(op, [("a", [4, 6]), ("b", [6])])
    exact(p, {"a": a, "b": b}, tmp_path, {"y": _r(want)})


def test_relu_is_exact(tmp_path):
    x = RNG.standard_normal((3, 7)).astype(np.float32) * 100
    exact(_one("Relu", [("x", [3, 7])]), {"x": x}, tmp_path, {"y": _r(np.maximum(_r(x), 0))})


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Exp", "Erf", "Softplus", "Gelu"])
def test_unary_transcendental(op, tmp_path):
    check(_one(op, [("x", [5, 9])]), {"x": _h((5, 9), 2)}, tmp_path, **TOL1)


def test_fused_tree_with_broadcast(tmp_path):
    # Mul → Add → Tanh → Sigmoid, one kernel: intermediates stay float in registers, so the
    # chain rounds once, at the output (TOL1)
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["t0"]),
        helper.make_node("Add", ["t0", "b"], ["t1"]),
        helper.make_node("Tanh", ["t1"], ["t2"]),
        helper.make_node("Sigmoid", ["t2"], ["y"]),
    ]
    p = model(nodes, [("x", [2, 3, 4]), ("s", [3, 1])], ["y"], [("b", _h((4,)))])
    _, h = handle(p)
    assert len(specialized(h).launches) == 1
    OpenCLRuntime().destroy(h)
    check(p, {"x": _h((2, 3, 4)), "s": _h((3, 1))}, tmp_path, **TOL1)


def test_typed_mix_of_where_comparisons_and_casts(tmp_path):
    # Greater (bool) → Where (float) → Mul → Cast to int32, and an int64 → float32 Cast: bool and
    # integer values are not touched by fp16 storage
    nodes = [
        helper.make_node("Greater", ["x", "z"], ["m"]),
        helper.make_node("Where", ["m", "x", "z"], ["w"]),
        helper.make_node("Mul", ["w", "k"], ["v"]),
        helper.make_node("Cast", ["v"], ["yi"], to=TensorProto.INT32),
        helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["f", "x"], ["yf"]),
        helper.make_node("Equal", ["i", "j"], ["yb"]),
    ]
    p = model(
        nodes,
        [("x", [3, 4]), ("z", [4]), ("i", [3, 4], np.int64), ("j", [4], np.int64)],
        [("yi", np.int32), "yf", ("yb", np.bool_)],
        [("k", np.float32(10.0))],
    )
    # x and z on a grid of quarters plus an eighth: exact in half, and their products by 10 end in
    # .25 or .75, never within half's rounding of an integer, so the Cast truncates alike whether
    # a kernel rounds the product to half first (stored) or keeps it in float (fused, as on cuda)
    feeds = {
        "x": np.float32(np.floor(_h((3, 4), 4) * 4) / 4 + 0.125),
        "z": np.float32(np.floor(_h((4,)) * 4) / 4 + 0.125),
        "i": RNG.integers(-3, 3, (3, 4)),
        "j": RNG.integers(-3, 3, (4,)),
    }
    x = feeds["x"]
    w = np.where(x > feeds["z"], x, feeds["z"])
    got = check(p, feeds, tmp_path, **TOL1)
    # Cast of the half-stored product truncates the same value numpy truncates
    np.testing.assert_array_equal(got["yi"], _r(w * 10).astype(np.int32))


def test_integers_keep_every_bit(tmp_path):
    # int64 values far past half's 11 bits go through untouched
    a = RNG.integers(-(2**40), 2**40, (3, 4))
    p = model(
        [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Neg", ["t"], ["y"])],
        [("a", [3, 4], np.int64), ("b", [4], np.int64)],
        [("y", np.int64)],
    )
    b = RNG.integers(-(2**40), 2**40, (4,))
    exact(p, {"a": a, "b": b}, tmp_path, {"y": -(a + b)})


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max"])
def test_variadic(op, tmp_path):
    p = _one(op, [("a", [2, 5]), ("b", [5]), ("c", [2, 1])])
    check(p, {"a": _h((2, 5)), "b": _h((5,)), "c": _h((2, 1))}, tmp_path, **TOL1)


def test_clip_pow_isnan(tmp_path):
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Pow", ["c", "e"], ["y"]),
        helper.make_node("IsNaN", ["x"], ["n"]),
    ]
    p = model(
        nodes,
        [("x", [4, 5])],
        ["y", ("n", np.bool_)],
        [("lo", np.float32(-1.5)), ("hi", np.float32(2.0)), ("e", np.int64(3))],
    )
    x = _h((4, 5), 2)
    x[1, 1] = np.nan
    check(p, {"x": x}, tmp_path, rtol=1e-3, atol=1e-3)


# ---- MatMul / Gemm -------------------------------------------------------------------------------

GEMM_CASES = {
    "matmul odd sizes": (
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [21, 33])],
        [("b", (33, 19))],
    ),
    "batched broadcast": (
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [2, 1, 17, 20])],
        [("b", (3, 20, 66))],
    ),
    "gemm transposes and row bias": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        [("a", [19, 40])],
        [("b", (72, 19)), ("c", (72,))],
    ),
    "gemm column bias": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"])],
        [("a", [3, 40])],
        [("b", (40, 70)), ("c", (3, 1))],
    ),
}


@pytest.mark.parametrize("variant", list(linalg.VARIANTS))
@pytest.mark.parametrize("case", list(GEMM_CASES))
def test_gemm_variant(case, variant, tmp_path, monkeypatch):
    # Exact inputs and weights, float32 sums: one rounding of results of size ~sqrt(K) ≈ 6
    # (atol 4e-3 ≈ 6 · 1.5u), plus the bias rounded on the way in for Gemm (exact here).
    nodes, inputs, init = GEMM_CASES[case]
    monkeypatch.setattr(linalg, "variant_for", lambda b, g: variant)
    p = model(nodes, inputs, ["y"], [(n, _h(s)) for n, s in init])
    check(p, {n: _h(s) for n, s in inputs}, tmp_path, rtol=1e-3, atol=4e-3)


def test_gemm_of_inexact_values(tmp_path):
    # Inputs and weights rounded on the way in (u each), products summed over K = 48: the error
    # of the result against float32 is about sqrt(K) · 2u · |x||w| ≈ 7e-3 at most here.
    p = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [8, 48])],
        ["y"],
        [("b", RNG.standard_normal((48, 9)).astype(np.float32))],
    )
    check(p, {"a": RNG.standard_normal((8, 48)).astype(np.float32)}, tmp_path, rtol=1e-2, atol=1e-2)


# ---- Conv / ConvTranspose / pools ------------------------------------------------------------------


def _kernels(program) -> set[str]:
    _, h = handle(program)
    names = {
        "gemm" if k.kernel.function_name.startswith("gemm") else k.kernel.function_name
        for k in specialized(h).launches
    }
    OpenCLRuntime().destroy(h)
    return names


def _conv(op, xs, ws, attrs, bias):
    nb = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    init = [("w", _h(ws, 0.5))] + ([("b", _h((nb,)))] if bias else [])
    names = ["x", "w"] + (["b"] if bias else [])
    return model([helper.make_node(op, names, ["y"], **attrs)], [("x", list(xs))], ["y"], init)


# (X shape, W shape, attributes, bias, the kernels the strategy picks)
CONV_CASES = [
    ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}, True, {"conv_direct"}),
    ((1, 4, 8, 8), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, True, {"conv_direct"}),  # depthwise
    (
        (2, 8, 10, 9),
        (5, 8, 3, 3),
        {"dilations": [2, 1], "strides": [1, 2], "pads": [2, 0, 1, 1]},
        True,
        {"conv_gemm"},
    ),
    ((2, 16, 7, 8), (6, 8, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True, {"conv_gemm"}),
    ((2, 6, 5, 5), (3, 6, 1, 1), {}, True, {"gemm"}),
    ((1, 8, 4, 6), (6, 4, 1, 1), {"group": 2}, True, {"gemm"}),
    ((2, 8, 20), (4, 8, 9), {"strides": [2], "pads": [3, 4]}, False, {"conv_gemm"}),
    ((1, 4, 5, 6, 7), (3, 4, 2, 3, 3), {"pads": [1, 0, 1, 0, 1, 1]}, True, {"conv_gemm"}),
]


@pytest.mark.parametrize("xs,ws,attrs,bias,kernels", CONV_CASES)
def test_conv(xs, ws, attrs, bias, kernels, tmp_path):
    # exact operands; sums of up to 72 products of size ~0.5 rounded once (plus, for a grouped
    # conv, the GEMM result stored before add_bias: a second rounding) → atol 4e-3
    p = _conv("Conv", xs, ws, attrs, bias)
    assert _kernels(p) == conv_kernels(kernels, ws, attrs, bias, device_kind())
    check(p, {"x": _h(xs)}, tmp_path, rtol=2e-3, atol=4e-3)


@pytest.mark.parametrize(
    "xs,ws,attrs,bias",
    [
        ((1, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}, True),
        ((2, 4, 3, 3), (4, 1, 2, 2), {"group": 2, "output_padding": [1, 0], "strides": [2, 2]}, False),
    ],
)
def test_conv_transpose(xs, ws, attrs, bias, tmp_path):
    check(_conv("ConvTranspose", xs, ws, attrs, bias), {"x": _h(xs)}, tmp_path, rtol=2e-3, atol=4e-3)


def test_maxpool_is_exact(tmp_path):
    x = _h((2, 3, 9, 8))
    p = _one("MaxPool", [("x", [2, 3, 9, 8])], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    exact(p, {"x": x}, tmp_path, reference(p, {"x": x}))


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1}),
        ("LpPool", {"kernel_shape": [2, 2], "p": 3}),
        ("GlobalAveragePool", {}),
        ("GlobalMaxPool", {}),
    ],
)
def test_pool(op, attrs, tmp_path):
    check(_one(op, [("x", [2, 3, 7, 6])], **attrs), {"x": _h((2, 3, 7, 6))}, tmp_path, **TOL1)


# ---- normalizations --------------------------------------------------------------------------------


def test_batchnorm(tmp_path):
    c = 4
    init = [("s", _h((c,))), ("b", _h((c,))), ("m", _h((c,))), ("v", _r(RNG.random(c) + 0.5))]
    p = _one("BatchNormalization", [("x", [2, c, 3, 5])], init)
    check(p, {"x": _h((2, c, 3, 5))}, tmp_path, **TOL1)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 300), -1), ((2, 5, 4), 1)])
def test_softmax(op, shape, axis, tmp_path):
    # one rounding of the output: TOL1 (LogSoftmax values reach ~10: rtol covers them)
    check(_one(op, [("x", list(shape))], axis=axis), {"x": _h(shape, 3)}, tmp_path, **TOL1)


def test_layer_instance_group_norm(tmp_path):
    # three row_norm launches, each one rounding of an O(1) output, the next reading it: the
    # input of the second and third is exact half, so each stays within TOL1 of a float32 chain
    # fed the same stored values; against float32 end to end the errors add up: 3u · |scale|
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ls", "lb"], ["a"], axis=-2),
        helper.make_node("InstanceNormalization", ["a", "is", "ib"], ["b"]),
        helper.make_node("GroupNormalization", ["b", "gs", "gb"], ["y"], num_groups=2),
    ]
    init = [
        ("ls", _h((5, 6))),
        ("lb", _h((5, 6))),
        ("is", _h((4,))),
        ("ib", _h((4,))),
        ("gs", _h((4,))),
        ("gb", _h((4,))),
    ]
    p = model(nodes, [("x", [2, 4, 5, 6])], ["y"], init)
    check(p, {"x": _h((2, 4, 5, 6), 2, 1)}, tmp_path, rtol=5e-3, atol=5e-3)


def test_lrn(tmp_path):
    p = _one("LRN", [("x", [2, 7, 3, 3])], size=3, alpha=1e-2, beta=0.75, bias=1.0)
    check(p, {"x": _h((2, 7, 3, 3), 3)}, tmp_path, **TOL1)


# ---- reductions ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        "ReduceSum",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ],
)
@pytest.mark.parametrize("axes,keepdims", [([-1], 1), ([0, 2], 0), ([1], 1)])
def test_reduce(op, axes, keepdims, tmp_path):
    # float32 accumulation of exact inputs, one rounding: TOL1 relative (sums reach ~10: atol 4e-3)
    shape = (3, 5, 130)
    if op == "ReduceProd":  # factors 1 ± 2^-8 (exact in half): products of up to 390 stay O(1)
        x = np.where(RNG.random(shape) < 0.5, 0.99609375, 1.00390625).astype(np.float32)
    elif op == "ReduceLogSum":  # positive sums
        x = _r(np.abs(_h(shape)) + 0.5)
    else:
        x = _h(shape)
    p = _one(op, [("x", list(shape))], [("axes", np.array(axes, np.int64))], keepdims=keepdims)
    check(p, {"x": x}, tmp_path, rtol=1e-3, atol=4e-3)


def test_reduce_max_is_exact_and_ints_untouched(tmp_path):
    x = _h((4, 6, 5))
    p = _one("ReduceMax", [("x", [4, 6, 5])], [("axes", np.array([1], np.int64))], keepdims=0)
    exact(p, {"x": x}, tmp_path, {"y": x.max(axis=1)})
    i = RNG.integers(-(2**40), 2**40, (4, 6))
    p = model(
        [helper.make_node("ReduceSum", ["i", "axes"], ["y"], keepdims=0)],
        [("i", [4, 6], np.int64)],
        [("y", np.int64)],
        [("axes", np.array([1], np.int64))],
    )
    exact(p, {"i": i}, tmp_path, {"y": i.sum(axis=1)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last_index", [0, 1])
def test_arg_reduce(op, select_last_index, tmp_path):
    # values repeat (ties) and a float32 that rounds onto its neighbour in half: the indices are
    # those of the stored (rounded) values
    x = RNG.integers(-4, 5, (3, 7, 4)).astype(np.float32) / 4
    x[0, 1, 0] = 1 + 2**-13  # rounds to 1.0 in half: a tie with any 1.0 of its column
    p = model(
        [helper.make_node(op, ["x"], ["y"], axis=1, select_last_index=select_last_index)],
        [("x", [3, 7, 4])],
        [("y", np.int64)],
    )
    exact(p, {"x": x}, tmp_path, reference(p, {"x": _r(x)}))


# ---- data movement: exact ----------------------------------------------------------------------------


def _inexact(shape):
    return RNG.standard_normal(shape).astype(np.float32)  # not representable in half: rounded in


@pytest.mark.parametrize(
    "op,inputs,init,attrs",
    [
        ("Transpose", [("x", [2, 3, 4])], [], {"perm": [2, 0, 1]}),
        (
            "Slice",
            [("x", [5, 6])],
            [
                ("s", np.array([4, 1], np.int64)),
                ("e", np.array([-6, 5], np.int64)),
                ("a", np.array([0, 1], np.int64)),
                ("t", np.array([-2, 2], np.int64)),
            ],
            {},
        ),
        ("Gather", [("x", [5, 3])], [("i", np.array([[4, -1], [0, 2]], np.int64))], {"axis": 0}),
        ("GatherElements", [("x", [3, 4])], [("i", np.array([[2, 0, 1, 1]], np.int64))], {"axis": 0}),
        ("Expand", [("x", [3, 1])], [("s", np.array([2, 3, 4], np.int64))], {}),
        ("Tile", [("x", [2, 3])], [("r", np.array([2, 2], np.int64))], {}),
        ("Pad", [("x", [3, 4])], [("p", np.array([1, 0, 2, 1], np.int64)), ("v", np.float32(0.3))], {}),
        ("Pad", [("x", [3, 4])], [("p", np.array([2, 1, 1, 2], np.int64))], {"mode": "reflect"}),
        ("Pad", [("x", [3, 4])], [("p", np.array([1, 2, 2, 1], np.int64))], {"mode": "edge"}),
        ("Pad", [("x", [3, 4])], [("p", np.array([1, 2, 2, 1], np.int64))], {"mode": "wrap"}),
        ("DepthToSpace", [("x", [1, 8, 2, 3])], [], {"blocksize": 2}),
        (
            "Resize",
            [("x", [1, 2, 3, 4])],
            [("r", np.zeros(0, np.float32)), ("sc", np.array([1, 1, 2, 1.5], np.float32))],
            {"mode": "nearest"},
        ),
    ],
)
def test_data_movement_is_exact(op, inputs, init, attrs, tmp_path):
    # the stored half bits move untouched: the result is the reference on the rounded input
    # (Pad's fill value 0.3 is a weight: rounded once, like the input)
    p = _one(op, inputs, init, **attrs)
    feeds = {n: _inexact(s) for n, s in inputs}
    want = reference(p, {n: _r(v) for n, v in feeds.items()})
    exact(p, feeds, tmp_path, {k: _r(v) for k, v in want.items()})


def test_concat_split_and_int64_gather(tmp_path):
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("Split", ["c", "sp"], ["y0", "y1"], axis=1),
        helper.make_node("Gather", ["i", "g"], ["yi"], axis=1),
    ]
    p = model(
        nodes,
        [("a", [2, 3]), ("b", [2, 4]), ("i", [2, 5], np.int64)],
        ["y0", "y1", ("yi", np.int64)],
        [("sp", np.array([5, 2], np.int64)), ("g", np.array([4, 0, 4], np.int64))],
    )
    a, b, i = _inexact((2, 3)), _inexact((2, 4)), RNG.integers(-(2**50), 2**50, (2, 5))
    c = _r(np.concatenate([a, b], axis=1))
    exact(p, {"a": a, "b": b, "i": i}, tmp_path, {"y0": c[:, :5], "y1": c[:, 5:], "yi": i[:, [4, 0, 4]]})


def test_resize_linear(tmp_path):
    p = _one(
        "Resize",
        [("x", [1, 2, 4, 5])],
        [("r", np.zeros(0, np.float32)), ("sc", np.array([1, 1, 1.5, 2], np.float32))],
        mode="linear",
    )
    check(p, {"x": _h((1, 2, 4, 5))}, tmp_path, **TOL1)


def test_shape_and_constant_of_shape(tmp_path):
    # ConstantOfShape's float32 value is an init-time constant: stored as half (0.1 rounds once);
    # Shape's int64 is untouched, and its Cast to float32 stored as half (exact here)
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["shape"], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])
        ),
        helper.make_node("Add", ["x", "c"], ["y"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["z"], to=TensorProto.FLOAT),
    ]
    p = model(nodes, [("x", [3, 4])], ["y", "z"], [("shape", np.array([3, 4], np.int64))])
    x = _h((3, 4))
    want = {"y": _r(x + _r(np.float32(0.1))), "z": np.array([3, 4], np.float32)}
    exact(p, {"x": x}, tmp_path, want)


# ---- whole models --------------------------------------------------------------------------------------


def _half_storage(model: bytes) -> bytes:
    """The model as fp16 storage runs it, for onnxruntime: weights rounded to half, and every
    op's float32 result cast to float16 and back (onnxruntime's Cast rounds to nearest even)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load_from_string(model)
    inits = [numpy_helper.to_array(t) for t in m.graph.initializer]
    rounded = [
        numpy_helper.from_array(_r(a) if a.dtype == np.float32 else a, t.name)
        for a, t in zip(inits, m.graph.initializer)
    ]
    del m.graph.initializer[:]
    m.graph.initializer.extend(rounded)
    nodes = []
    for node in m.graph.node:
        outs = list(node.output)
        node.output[:] = [f"{o}.f32" for o in outs]
        nodes.append(node)
        for o in outs:
            nodes.append(helper.make_node("Cast", [f"{o}.f32"], [f"{o}.f16"], to=TensorProto.FLOAT16))
            nodes.append(helper.make_node("Cast", [f"{o}.f16"], [o], to=TensorProto.FLOAT))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m.SerializeToString()


def test_example_model(example_model, tmp_path):
    """A small CNN, every intermediate and weight stored as half, against onnxruntime running
    the same model with the same roundings to half (``_half_storage``): both compute each op in
    float32 from the same half values, so they can differ only where float32's own rounding
    (2^13 times finer than half's) tips a result across a half rounding boundary: by one half
    ulp, 2u of the value. Against plain float32 onnxruntime the logits differ by about 1.5 u of
    their largest, so a kernel that is wrong by more than that shows."""
    import onnx

    m = onnx.load(example_model)
    m.graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, None))
    data = m.SerializeToString()
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = onnxruntime_outputs(_half_storage(data), {"image": _r(x)})
    _, got = run_fp16(offload.load(data), {"image": x}, tmp_path)
    for k, v in want.items():
        assert_close(got[k], v, rtol=2 * unit_roundoff(np.float16), err_msg=k)


def _squeezenet(reweight: bool) -> tuple:
    """onnx's light SqueezeNet (weights made by ConstantOfShape, 0.02 everywhere) and its input;
    ``reweight``: the weights become random initializers, He-scaled (normal · sqrt(2 / fan-in)),
    so that activations stay O(1) and the classes differ."""
    import onnx
    from onnx import numpy_helper

    from tests.conformance.cases import light_cases

    (case,) = [c for c in light_cases() if c.name == "light_squeezenet"]
    m = onnx.load_from_string(case.model)
    if reweight:
        rng = np.random.default_rng(3)
        inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
        keep, shapes = [], set()
        for node in m.graph.node:
            if node.op_type != "ConstantOfShape":
                keep.append(node)
                continue
            shapes.add(node.input[0])
            shape = [int(d) for d in inits[node.input[0]]]
            scale = np.sqrt(2 / np.prod(shape[1:])) if len(shape) > 1 else 0.1
            w = (rng.standard_normal(shape) * scale).astype(np.float32)
            m.graph.initializer.append(numpy_helper.from_array(w, node.output[0]))
        del m.graph.node[:]
        m.graph.node.extend(keep)
        for field in (m.graph.initializer, m.graph.input):  # the shapes, now unused
            kept = [t for t in field if t.name not in shapes]
            del field[:]
            field.extend(kept)
    ((feeds, _),) = case.data_sets
    return m.SerializeToString(), feeds


def test_light_squeezenet(tmp_path):
    # 26 convs, concats, pools and a softmax, every intermediate stored as half, He-scaled weights
    # keeping activations O(1): against onnxruntime with the same roundings to half
    # (``_half_storage``), within one half ulp (2u) of the largest probability, as in
    # test_example_model; and near plain float32 onnxruntime's, the classes told apart.
    data, feeds = _squeezenet(reweight=True)
    want = onnxruntime_outputs(_half_storage(data), {k: _r(v) for k, v in feeds.items()})
    _, got = run_fp16(offload.load(data), feeds, tmp_path)
    (name,) = got
    assert_close(got[name], want[name], rtol=2 * unit_roundoff(np.float16), err_msg=name)
    (plain,) = onnxruntime_outputs(data, feeds).values()
    assert plain.max() > 10 * plain.min()  # the classes differ: a wrong network would show
    assert np.argmax(got[name]) == np.argmax(plain)


def test_one_half_ulp_tells_the_outputs_of_two_inputs_apart():
    # The bound of test_light_squeezenet must not be one that any softmax output passes: the
    # probabilities (about 7e-5 to 0.22) of six different random inputs, each against every other,
    # all fail it. (rtol = atol = 2e-2 against float32 passed all 190 pairs of 20 such inputs.)
    import itertools

    data, feeds = _squeezenet(reweight=True)
    ((name, x0),) = feeds.items()
    half, rng = _half_storage(data), np.random.default_rng(5)
    outs = []
    for _ in range(6):
        x = rng.standard_normal(x0.shape).astype(np.float32) * x0.std() + x0.mean()
        outs.extend(onnxruntime_outputs(half, {name: _r(x)}).values())
    for a, b in itertools.combinations(outs, 2):
        with pytest.raises(AssertionError):
            assert_close(a, b, rtol=2 * unit_roundoff(np.float16))


def test_light_squeezenet_as_published_overflows_half(tmp_path):
    # With its published weights (0.02 everywhere) its activations reach ~2e9 in float32, past
    # half's largest finite value (65504): fp16 storage turns them into inf, the softmax into NaN.
    # Storage precision is a choice for models whose values fit in half; this one does not.
    data, feeds = _squeezenet(reweight=False)
    _, got = run_fp16(offload.load(data), feeds, tmp_path)
    (y,) = got.values()
    assert not np.isfinite(y).any()


def _fp16_module(program, check: str | None):
    specs = {
        "opencl": {"precision": "fp16", "mixed": "0", **({"fp16_check": check} if check is not None else {})}
    }
    lowered = offload.to_backend(program, "opencl", compile_specs=specs, passes="none")
    module = runtime.load(offload.save(lowered))
    assert all(d.runs_on == "backend" for d in module.method("forward").delegates)
    return module


def test_without_the_check_an_overflow_is_silent_inf():
    module = _fp16_module(overflowing(), None)
    y = module.run({"x": np.full((2, 3), 100, np.float32)})["y"]
    assert np.isinf(y).all()  # what fp16_check is there to catch


def test_fp16_check_reruns_an_overflowing_call_in_float32_and_warns_once():
    program = overflowing()
    module = _fp16_module(program, "1")
    small = {"x": _h((2, 3))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow: the fp16 plan's answer, no warning
        np.testing.assert_allclose(module.run(small)["y"], reference(program, small)["y"], **TOL1)
    big = {"x": np.full((2, 3), 100, np.float32) + _h((2, 3))}
    with pytest.warns(RuntimeWarning, match="fp16_check=1"):
        got = module.run(big)["y"]
    np.testing.assert_allclose(got, reference(program, big)["y"], rtol=1e-6)  # float32's answer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per handle
        np.testing.assert_allclose(module.run(big)["y"], reference(program, big)["y"], rtol=1e-6)


def test_fp16_check_takes_0_or_1():
    with pytest.raises(CompileSpecError, match="fp16_check='yes'"):
        offload.to_backend(
            overflowing(), "opencl", compile_specs={"opencl": {"fp16_check": "yes"}}, passes="none"
        )
