"""TFLite math, bitwise and boolean-reduction operators (frontends/tflite_math_ops.py) and the
layers of frontends/tflite_nn_ops.py, each in a hand-built one-operator model run by LiteRT live
as the reference; offload runs it with ``evaluate`` and from a ``.pte`` (some on opencl too)."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType as TT
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import T
from tests.frontends.tflite.litert import check, one_op, options

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")

RNG = np.random.default_rng(20261129)
F32, I32, BOOL = TT.FLOAT32, TT.INT32, TT.BOOL


def floats(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_round_takes_halves_to_even(backend, tmp_path):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.7, 1e8 + 1, 7.2], np.float32)
    data = one_op(B.ROUND, [T("x", [11])], [T("y", [11])])
    check(data, {"x": x}, tmp_path, backend=backend, rtol=0, atol=0)


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_atan2_in_every_quadrant_and_on_the_axes(backend, tmp_path):
    z, inf = 0.0, np.inf
    pairs = [(1, 1), (1, -1), (-1, -1), (-1, 1), (z, 1), (z, -1), (-z, -1), (1, z), (-1, z), (1, -z)]
    pairs += [(z, z), (z, -z), (-z, -z), (inf, inf), (-inf, -inf), (1, -inf), (-1, inf), (inf, 3)]
    pairs += [(3e-30, -2.0), (-5.0, 1e-20), (np.nan, 1.0), (0.0, np.nan)]
    y, x = (np.array(v, np.float32) for v in zip(*pairs))
    y = np.concatenate([y, floats(20) * 4])
    x = np.concatenate([x, floats(20) * 4])
    n = len(y)
    data = one_op(B.ATAN2, [T("y", [n]), T("x", [n])], [T("z", [n])])
    check(data, {"y": y, "x": x}, tmp_path, backend=backend, rtol=1e-6, atol=0)


@pytest.mark.parametrize("ttype", [F32, I32])
def test_add_n(ttype, tmp_path):
    dtype = np.float32 if ttype == F32 else np.int32
    data = one_op(B.ADD_N, [T(f"x{i}", [2, 3], ttype) for i in range(3)], [T("y", [2, 3], ttype)])
    check(data, {f"x{i}": (floats(2, 3) * 10).astype(dtype) for i in range(3)}, tmp_path)


def test_relu_0_to_1(tmp_path):
    data = one_op(B.RELU_0_TO_1, [T("x", [12])], [T("y", [12])])
    check(data, {"x": floats(12)}, tmp_path)


INT_TYPES = {
    TT.INT8: np.int8,
    TT.INT16: np.int16,
    TT.INT32: np.int32,
    TT.UINT8: np.uint8,
    TT.UINT32: np.uint32,
}


@pytest.mark.parametrize("ttype", [TT.INT8, TT.INT16, TT.INT32, TT.UINT8, TT.UINT32])
def test_bitwise_xor(ttype, tmp_path):
    dtype = INT_TYPES[ttype]
    info = np.iinfo(dtype)
    a, b = (RNG.integers(info.min, info.max, 16, endpoint=True).astype(dtype) for _ in range(2))
    data = one_op(B.BITWISE_XOR, [T("a", [16], ttype), T("b", [16], ttype)], [T("y", [16], ttype)])
    check(data, {"a": a, "b": b}, tmp_path)


@pytest.mark.parametrize("ttype", [TT.INT8, TT.INT16, TT.INT32, TT.UINT8, TT.UINT32])
def test_right_shift_clamps_the_shift(ttype, tmp_path):
    dtype = INT_TYPES[ttype]
    info = np.iinfo(dtype)
    bits = info.bits
    x = RNG.integers(info.min, info.max, 12, endpoint=True).astype(dtype)
    x[:2] = [info.min, info.max]
    # LiteRT clamps a shift to [0, bits - 1]
    shift = np.array([0, 1, 2, 3, bits - 1, bits, 5, 1, bits + 3, bits // 2, -3, 7])
    shift = shift.astype(np.int64).astype(dtype)
    data = one_op(B.RIGHT_SHIFT, [T("x", [12], ttype), T("s", [12], ttype)], [T("y", [12], ttype)])
    check(data, {"x": x, "s": shift}, tmp_path)


@pytest.mark.parametrize("op", ["REDUCE_ANY", "REDUCE_ALL"])
@pytest.mark.parametrize("axes, keep", [([1], False), ([0, 2], True), ([], False)])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_reduce_any_all(op, axes, keep, backend, tmp_path):
    shape = [3, 4, 2]
    out = (
        [1 if i in axes else d for i, d in enumerate(shape)]
        if keep
        else [d for i, d in enumerate(shape) if i not in axes]
    )
    x = RNG.random(shape) < (0.2 if op == "REDUCE_ANY" else 0.8)
    x[0] = op == "REDUCE_ALL"
    data = one_op(
        getattr(B, op),
        [T("x", shape, BOOL), T("axes", [len(axes)], I32, np.array(axes, np.int32))],
        [T("y", out, BOOL)],
        options("ReducerOptions", keep_dims=keep),
    )
    check(data, {"x": x}, tmp_path, backend=backend)


def l2_pool_model(padding: int, kernel, strides, out_hw, act: int = 0) -> bytes:
    return one_op(
        B.L2_POOL_2D,
        [T("x", [1, 5, 6, 3])],
        [T("y", [1, *out_hw, 3])],
        options(
            "Pool2DOptions",
            padding=padding,
            filter_height=kernel[0],
            filter_width=kernel[1],
            stride_h=strides[0],
            stride_w=strides[1],
            fused_activation_function=act,
        ),
    )


@pytest.mark.parametrize(
    "padding, kernel, strides, out_hw, act",
    [(Padding.SAME, (3, 2), (2, 2), (3, 3), 0), (Padding.VALID, (2, 3), (1, 2), (4, 2), 3)],
    ids=["same", "valid_relu6"],
)
def test_l2_pool(padding, kernel, strides, out_hw, act, tmp_path):
    data = l2_pool_model(padding, kernel, strides, out_hw, act)
    check(data, {"x": floats(1, 5, 6, 3) * 3}, tmp_path, rtol=1e-5, atol=1e-6)


def lrn_model(radius: int) -> bytes:
    return one_op(
        B.LOCAL_RESPONSE_NORMALIZATION,
        [T("x", [1, 3, 4, 7])],
        [T("y", [1, 3, 4, 7])],
        options("LocalResponseNormalizationOptions", radius=radius, bias=1.5, alpha=0.3, beta=0.75),
    )


@pytest.mark.parametrize("radius", [0, 2, 5])
def test_local_response_normalization(radius, tmp_path):
    check(lrn_model(radius), {"x": floats(1, 3, 4, 7)}, tmp_path, rtol=1e-5, atol=1e-6)


def conv3d_model(padding: int, strides, dilation, bias: bool, act: int = 0) -> tuple[bytes, list]:
    x_shape, w = [1, 4, 5, 6, 2], floats(2, 3, 2, 2, 3)  # DHWIO
    out = []
    for size, k, s, d in zip(x_shape[1:4], w.shape[:3], strides, dilation):
        extent = (k - 1) * d + 1
        out.append(-(-size // s) if padding == Padding.SAME else (size - extent) // s + 1)
    tensors = [T("x", x_shape), T("w", list(w.shape), data=w)]
    if bias:
        tensors.append(T("b", [3], data=floats(3)))
    fields = dict(zip(("stride_d", "stride_h", "stride_w"), strides))
    fields.update(zip(("dilation_d_factor", "dilation_h_factor", "dilation_w_factor"), dilation))
    opts = options("Conv3DOptions", padding=padding, fused_activation_function=act, **fields)
    return one_op(B.CONV_3D, tensors, [T("y", [1, *out, 3])], opts), x_shape


@pytest.mark.parametrize(
    "padding, strides, dilation, bias, act",
    [
        (Padding.SAME, (1, 2, 2), (1, 1, 1), True, 1),
        (Padding.VALID, (2, 1, 1), (1, 2, 1), False, 0),
        (Padding.SAME, (1, 1, 2), (2, 1, 2), True, 0),
    ],
    ids=["same_strided_relu", "valid_dilated", "same_dilated"],
)
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_conv_3d(padding, strides, dilation, bias, act, backend, tmp_path):
    data, shape = conv3d_model(padding, strides, dilation, bias, act)
    check(data, {"x": floats(*shape)}, tmp_path, backend=backend, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "padding, strides, out_dhw, bias",
    [
        (Padding.SAME, (2, 2, 1), (6, 8, 5), True),
        (Padding.VALID, (1, 2, 2), (4, 9, 11), False),
        (Padding.SAME, (2, 2, 2), (5, 7, 9), True),
    ],
    ids=["same", "valid", "same_odd_output"],
)
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_conv_3d_transpose(padding, strides, out_dhw, bias, backend, tmp_path):
    w = floats(2, 3, 3, 4, 2)  # DHWOI
    tensors = [
        T("shape", [5], I32, np.array([1, *out_dhw, 4], np.int32)),
        T("w", list(w.shape), data=w),
        T("x", [1, 3, 4, 5, 2]),
    ]
    if bias:
        tensors.append(T("b", [4], data=floats(4)))
    fields = dict(zip(("stride_d", "stride_h", "stride_w"), strides))
    data = one_op(
        B.CONV_3D_TRANSPOSE,
        tensors,
        [T("y", [1, *out_dhw, 4])],
        options("Conv3DOptions", padding=padding, **fields),
    )
    check(data, {"x": floats(1, 3, 4, 5, 2)}, tmp_path, backend=backend, rtol=1e-5, atol=1e-5)


@needs_opencl
def test_l2_pool_and_lrn_on_opencl(tmp_path):
    data = l2_pool_model(Padding.SAME, (3, 2), (2, 2), (3, 3))
    check(data, {"x": floats(1, 5, 6, 3)}, tmp_path, rtol=1e-5, atol=1e-5, backend="opencl")
    check(lrn_model(2), {"x": floats(1, 3, 4, 7)}, tmp_path, rtol=1e-5, atol=1e-5, backend="opencl")


def nms_model(v5: bool, n: int, limit: int, iou: float, score: float, sigma: float = 0.0) -> bytes:
    inputs = [
        T("boxes", [n, 4]),
        T("scores", [n]),
        T("limit", [], I32, np.array(limit, np.int32)),
        T("iou", [], data=np.array(iou, np.float32)),
        T("score", [], data=np.array(score, np.float32)),
    ]
    outputs = [T("indices", [limit], I32)]
    if v5:
        inputs.append(T("sigma", [], data=np.array(sigma, np.float32)))
        outputs.append(T("selected_scores", [limit]))
    outputs.append(T("valid", [], I32))
    code = B.NON_MAX_SUPPRESSION_V5 if v5 else B.NON_MAX_SUPPRESSION_V4
    table = "NonMaxSuppressionV5Options" if v5 else "NonMaxSuppressionV4Options"
    return one_op(code, inputs, outputs, options(table))


@pytest.mark.parametrize("v5", [False, True], ids=["v4", "v5"])
@pytest.mark.parametrize("limit, iou, score", [(6, 0.4, 0.0), (20, 0.6, -1.0), (3, 0.3, 0.5)])
def test_non_max_suppression(v5, limit, iou, score, tmp_path):
    n = 16
    corner = RNG.uniform(0, 4, (n, 2))
    size = RNG.uniform(0.5, 2.5, (n, 2))
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    boxes[::3] = boxes[::3][:, [2, 3, 0, 1]]  # corners in either order
    boxes[1] = [0, 0, 1, 1]  # IoU with box 0 exactly 1/2
    boxes[0] = [0, 0, 1, 2]
    scores = RNG.permutation(n).astype(np.float32) / n
    check(nms_model(v5, n, limit, iou, score), {"boxes": boxes, "scores": scores}, tmp_path)
    # LiteRT drops box 1 at an IoU threshold of exactly 1/2
    check(nms_model(v5, n, limit, 0.5, score), {"boxes": boxes, "scores": scores}, tmp_path)


def test_soft_non_max_suppression_is_refused_by_name():
    with pytest.raises(offload.errors.UnsupportedOpError, match=r"NON_MAX_SUPPRESSION_V5.*soft_nms_sigma"):
        offload.load(nms_model(True, 4, 2, 0.5, 0.0, sigma=0.5))


@pytest.mark.parametrize(
    "lo, hi, bits",
    [(-1.0, 1.0, 8), (-0.3, 2.7, 4), (0.2, 3.0, 8), (-6.0, -1.0, 3)],
    ids=["symmetric", "4bit", "min_above_zero", "max_below_zero"],
)
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_fake_quant_nudges_its_range_as_litert(lo, hi, bits, backend, tmp_path):
    data = one_op(
        B.FAKE_QUANT,
        [T("x", [64])],
        [T("y", [64])],
        options("FakeQuantOptions", min=lo, max=hi, num_bits=bits),
    )
    x = np.linspace(lo - 1, hi + 1, 64, dtype=np.float32)
    check(data, {"x": x}, tmp_path, backend=backend, rtol=0, atol=0)


def test_narrow_range_fake_quant_is_refused_as_litert_refuses_it():
    opts = options("FakeQuantOptions", min=-1.0, max=1.0, num_bits=8, narrow_range=True)
    with pytest.raises(offload.errors.UnsupportedOpError, match=r"FAKE_QUANT.*narrow_range"):
        offload.load(one_op(B.FAKE_QUANT, [T("x", [4])], [T("y", [4])], opts))


@pytest.mark.parametrize("src, dst", [(F32, I32), (I32, TT.UINT32), (TT.INT16, TT.FLOAT16)])
def test_bitcast_between_types_of_one_width(src, dst, tmp_path):
    numpy = {F32: np.float32, I32: np.int32, TT.UINT32: np.uint32, TT.INT16: np.int16, TT.FLOAT16: np.float16}
    x = RNG.integers(-1000, 1000, 6).astype(numpy[src])
    data = one_op(B.BITCAST, [T("x", [2, 3], src)], [T("y", [2, 3], dst)])
    check(data, {"x": x.reshape(2, 3)}, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize(
    "op", ["STABLEHLO_ADD", "STABLEHLO_MULTIPLY", "STABLEHLO_MAXIMUM", "STABLEHLO_MINIMUM"]
)
@pytest.mark.parametrize("ttype", [F32, I32, TT.INT8])
def test_stablehlo_elementwise(op, ttype, tmp_path):
    dtype = {F32: np.float32, I32: np.int32, TT.INT8: np.int8}[ttype]
    a, b = (floats(2, 5) * 20).astype(dtype), (floats(2, 5) * 20).astype(dtype)
    data = one_op(getattr(B, op), [T("a", [2, 5], ttype), T("b", [2, 5], ttype)], [T("y", [2, 5], ttype)])
    check(data, {"a": a, "b": b}, tmp_path)


@pytest.mark.parametrize("ttype", [BOOL, I32, TT.INT8])
def test_stablehlo_and(ttype, tmp_path):
    dtype = {BOOL: bool, I32: np.int32, TT.INT8: np.int8}[ttype]
    a, b = (RNG.integers(-100, 100, 8).astype(dtype) for _ in range(2))
    data = one_op(B.STABLEHLO_AND, [T("a", [8], ttype), T("b", [8], ttype)], [T("y", [8], ttype)])
    check(data, {"a": a, "b": b}, tmp_path)
