"""The `opencl` backend's QuantizeLinear and DequantizeLinear (``quantize.cl``) on PoCL, against
onnxruntime: per tensor and per axis, int8 / uint8 (int32 to dequantize), negative zero points,
values on rounding ties, saturation, and a QDQ graph delegated as one partition whose constant
DequantizeLinear is folded at init instead of running each time."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates import registry

from .opencl_support import model, needs_opencl, plan_and_handle, reference, run_on_opencl, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(23)


def _qdq(shape, scale, zp, axis=1, out_dtype=np.int8):
    """x → QuantizeLinear → q (an output) → DequantizeLinear → y: both kernels on one input."""
    ins = ["x", "s"] + (["z"] if zp is not None else [])
    nodes = [
        helper.make_node("QuantizeLinear", ins, ["q"], axis=axis),
        helper.make_node("DequantizeLinear", ["q", *ins[1:]], ["y"], axis=axis),
    ]
    inits = [("s", np.asarray(scale, np.float32))] + ([("z", np.asarray(zp))] if zp is not None else [])
    return model(nodes, [("x", list(shape))], [("q", out_dtype), "y"], inits)


def _exact(p, feeds, tmp_path) -> dict:
    """The outputs of ``p`` run as one opencl partition, each equal to onnxruntime's bit for bit."""
    want = reference(p, feeds)
    lowered, got = run_on_opencl(p, feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, v.dtype)
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    return got


@pytest.mark.parametrize("dtype,zp", [(np.int8, -7), (np.int8, 0), (np.uint8, 128), (np.uint8, 3)])
def test_per_tensor(dtype, zp, tmp_path):
    p = _qdq((2, 3, 5), np.float32(0.0625), np.asarray(zp, dtype), out_dtype=dtype)
    x = (RNG.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    _exact(p, {"x": x}, tmp_path)


def test_no_zero_point_quantizes_to_uint8(tmp_path):
    p = _qdq((4, 6), np.float32(0.02), None, out_dtype=np.uint8)
    x = RNG.uniform(-1, 6, (4, 6)).astype(np.float32)
    _exact(p, {"x": x}, tmp_path)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_output_dtype_without_a_zero_point(dtype, tmp_path):
    # opset 21's form: the quantized type from the attribute, the scale of one element as (1,)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=to),
        helper.make_node("DequantizeLinear", ["q", "s"], ["y"]),
    ]
    p = model(nodes, [("x", [3, 7])], [("q", dtype), "y"], [("s", np.array([0.03], np.float32))])
    x = (RNG.standard_normal((3, 7)) * 2).astype(np.float32)
    _exact(p, {"x": x}, tmp_path)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_per_axis(axis, dtype, tmp_path):
    shape = (3, 4, 5)
    C = shape[axis]
    scale = RNG.uniform(0.01, 0.2, C).astype(np.float32)
    lo = -20 if dtype == np.int8 else 100
    zp = RNG.integers(lo, lo + 40, C).astype(dtype)
    p = _qdq(shape, scale, zp, axis=axis, out_dtype=dtype)
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    _exact(p, {"x": x}, tmp_path)


@pytest.mark.parametrize("dtype,zp", [(np.int8, -3), (np.uint8, 10)])
def test_ties_round_half_to_even(dtype, zp, tmp_path):
    # x / 0.5 lands on every half-integer from -9.5 to 9.5: -9.5 → -10, -8.5 → -8, 0.5 → 0, 1.5 → 2
    x = (np.arange(-19, 20, dtype=np.float32) * 0.25).reshape(1, -1)
    assert np.sum(np.modf(np.abs(x / 0.5))[0] == 0.5) == 20
    p = _qdq(x.shape, np.float32(0.5), np.asarray(zp, dtype), out_dtype=dtype)
    q = _exact(p, {"x": x}, tmp_path)["q"]
    info = np.iinfo(dtype)
    assert np.array_equal(q, np.clip(np.rint(x.astype(np.float64) / 0.5) + zp, info.min, info.max))


@pytest.mark.parametrize("dtype,zp", [(np.int8, 0), (np.int8, -100), (np.uint8, 0), (np.uint8, 250)])
def test_saturates_out_of_range(dtype, zp, tmp_path):
    x = np.array([[-1e9, -300.0, -128.6, -0.2, 0.2, 127.4, 255.6, 300.0, 1e9, np.inf, -np.inf]], np.float32)
    p = _qdq(x.shape, np.float32(1.0), np.asarray(zp, dtype), out_dtype=dtype)
    q = _exact(p, {"x": x}, tmp_path)["q"]
    info = np.iinfo(dtype)
    assert q[0, 0] == info.min and q[0, -3] == info.max and q[0, -2] == info.max and q[0, -1] == info.min


def test_dequantize_int32_bias_per_axis(tmp_path):
    # a bias as a quantizer stores it: int32, zero point 0, scale x_scale · w_scale per channel
    b = np.array([-2_000_000_000, -5, 0, 7, 123_456_789, 2_000_000_000], np.int32)
    node = helper.make_node("DequantizeLinear", ["b", "s"], ["y"], axis=0)
    s = np.array([1e-4, 0.5, 2.0, 3e-3, 1e-6, 7e-9], np.float32)
    p = model([node], [("b", [6], np.int32)], ["y"], [("s", s)])
    _exact(p, {"b": b}, tmp_path)


def test_dequantize_of_an_input_with_a_negative_zero_point(tmp_path):
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    scale = np.array([0.1, 0.3, 0.7], np.float32)
    p = model(
        [node], [("q", [2, 3, 4], np.int8)], ["y"], [("s", scale), ("z", np.array([-128, -1, 5], np.int8))]
    )
    q = RNG.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    _exact(p, {"q": q}, tmp_path)


def _qdq_conv():
    """A QDQ conv as quantizers write it: the activation quantized and dequantized around the
    Conv, the int8 weight (per output channel) and the int32 bias dequantized from constants."""
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    w_scale = RNG.uniform(0.005, 0.02, 4).astype(np.float32)
    x_scale = np.float32(0.03)
    bias = RNG.integers(-3000, 3000, 4).astype(np.int32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
    ]
    inits = [
        ("xs", x_scale),
        ("xz", np.uint8(128)),
        ("w", w),
        ("ws", w_scale),
        ("b", bias),
        ("bs", (x_scale * w_scale).astype(np.float32)),
        ("ys", np.float32(0.05)),
        ("yz", np.int8(-10)),
    ]
    return model(nodes, [("x", [1, 3, 6, 6])], ["y"], inits)


def test_a_qdq_conv_is_one_partition_and_matches_onnxruntime_running_the_qdq_ops(tmp_path):
    """Against onnxruntime at ORT_DISABLE_ALL, which runs the float QDQ ops one by one as offload
    does. Its default level fuses the pattern into an integer QLinearConv whose uint8 × int8
    products saturate in int16 on x86 when weights use the full int8 range (these do): that
    result is off by up to 113 output steps here, and by none with weights in [-63, 63]."""
    import onnxruntime as ort

    from .opencl_support import _ONNX

    p = _qdq_conv()
    x = RNG.uniform(-3, 3, (1, 3, 6, 6)).astype(np.float32)
    compiler = registry.get("opencl").compiler()
    assert all(compiler.supports(op) for op in p.main.body.operations)
    lowered, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(_ONNX[p], opts, providers=["CPUExecutionProvider"])
    (want,) = session.run(["y"], {"x": x})
    # the same arithmetic up to the conv's summation order: a value next to a rounding tie may
    # land one output step (0.05) away, no more
    steps = np.abs(got["y"] - want) / np.float32(0.05)
    assert steps.max() <= 1 + 1e-5 and np.mean(steps > 0.5) < 0.05


def test_a_constant_dequantize_is_folded_at_init_not_run(tmp_path):
    p = _qdq_conv()
    plan, handle = plan_and_handle(p)
    try:
        assert sum(step["type"] == "DequantizeLinear" for step in plan["ops"]) == 4
        kernels = [launch.kernel.function_name for launch in specialized(handle).launches]
        # the two activations' dequantize run each time; the weight's and the bias's never do
        assert kernels.count("dequantize") == 2 and kernels.count("quantize") == 2, kernels
    finally:
        registry.get("opencl").runtime().destroy(handle)


def test_the_default_passes_keep_a_qdq_model_in_one_partition(tmp_path):
    p = _qdq_conv()
    x = RNG.uniform(-3, 3, (1, 3, 6, 6)).astype(np.float32)
    _lowered, got = run_on_opencl(p, {"x": x}, tmp_path, partitions=1, passes="default")
    cpu = offload.evaluate(offload.optimize(p), {"x": x})["y"]
    np.testing.assert_allclose(got["y"], cpu, atol=0.05 + 1e-6)


def test_blocked_and_float8_forms_stay_on_the_cpu():
    compiler = registry.get("opencl").compiler()
    blocked = helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2)
    p = model([blocked], [("q", [2, 4], np.int8)], ["y"], [("s", np.ones((2, 2), np.float32))])
    (op,) = p.main.body.operations
    assert not compiler.supports(op)
    wide = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    p = model([wide], [("x", [2, 4])], [("y", np.int16)], [("s", np.float32(1)), ("z", np.int16(0))])
    (op,) = p.main.body.operations
    assert "int16" in compiler.supports(op).reason or "i16" in compiler.supports(op).reason


@pytest.mark.parametrize("dtype,axis", [(np.int8, 0), (np.uint8, 1), (np.int32, 1)])
def test_a_constant_dequantize_folded_at_init_equals_onnxruntime(dtype, axis, tmp_path):
    # y = x + DequantizeLinear(w): fed x = 0, the device's sum is the folded weight, bit for bit
    info = np.iinfo(dtype)
    lo, hi = (-3_000_000, 3_000_000) if dtype == np.int32 else (info.min, info.max)
    w = RNG.integers(lo, hi, (4, 5), endpoint=True).astype(dtype)
    C = w.shape[axis]
    ins = ["w", "s"] + ([] if dtype == np.int32 else ["z"])
    zp = RNG.integers(info.min if dtype == np.int8 else 0, 20, C).astype(dtype)
    inits = [("w", w), ("s", RNG.uniform(1e-4, 0.1, C).astype(np.float32))] + (
        [("z", zp)] if len(ins) == 3 else []
    )
    nodes = [
        helper.make_node("DequantizeLinear", ins, ["wd"], axis=axis),
        helper.make_node("Add", ["x", "wd"], ["y"]),
    ]
    p = model(nodes, [("x", [4, 5])], ["y"], inits)
    _exact(p, {"x": np.zeros((4, 5), np.float32)}, tmp_path)
    _plan, handle = plan_and_handle(p)
    try:
        kernels = [launch.kernel.function_name for launch in specialized(handle).launches]
        assert "dequantize" not in kernels and len(kernels) == 1, kernels
    finally:
        registry.get("opencl").runtime().destroy(handle)
