"""EmbedLayerNormalization, QLinearSoftmax, QLinearWhere, QLinearConv (channels last), FusedGemm
and Trilu of domain com.microsoft, imported as ONNX ops (frontends/onnx_contrib*.py), against
onnxruntime running the same one-node models; through a .pte, and on the `opencl` backend."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload import runtime
from offload.errors import KernelError, ModelFormatError, UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.contrib_support import (
    SUMS,
    compare,
    contrib_model,
    node,
    normal,
    onnxruntime_run,
)

RNG = np.random.default_rng(11)
H, VOCAB, POSITIONS = 16, 30, 12


def _through_pte(program, feeds: dict) -> dict:
    return runtime.load(offload.save(program)).run(feeds)


def _check(data: bytes, feeds: dict, **tolerance) -> None:
    """offload.evaluate, then the saved .pte run by the runtime, against onnxruntime."""
    compare(data, feeds, **tolerance)
    want = onnxruntime_run(data, feeds)
    got = _through_pte(offload.load(data), feeds)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, v.dtype)
        np.testing.assert_allclose(got[k], v, err_msg=k, **tolerance)


def _ids(high, *shape):
    return RNG.integers(0, high, shape).astype(np.int32)


def _embed_model(with_segment=True, with_mask=True, with_positions=False, outputs=("y", "mi"), **attrs):
    b, s = 3, 7
    feeds = {"ids": _ids(VOCAB, b, s)}
    inputs = ["ids", "seg" if with_segment else "", "words", "positions", "segments" if with_segment else ""]
    inputs += ["gamma", "beta", "mask" if with_mask else ""]
    if with_segment:
        feeds["seg"] = _ids(2, b, s)
    if with_mask:  # the 2 and the -1 count as no 1 in onnxruntime's mask_index
        feeds["mask"] = RNG.choice(np.array([0, 1, 1, 2, -1], np.int32), (b, s))
    if with_positions:
        feeds["pos"] = _ids(POSITIONS, *with_positions)
        inputs.append("pos")
    while inputs[-1] == "":
        inputs.pop()
    inits = [
        ("words", normal(RNG, VOCAB, H)),
        ("positions", normal(RNG, POSITIONS, H)),
        ("segments", normal(RNG, 2, H)),
        ("gamma", normal(RNG, H)),
        ("beta", normal(RNG, H)),
    ]
    outs = [("mi", np.int32) if o == "mi" else o for o in outputs if o]
    return contrib_model(
        [node("EmbedLayerNormalization", inputs, list(outputs), **attrs)], feeds, outs, inits
    ), feeds


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"with_segment": False, "with_mask": False},
        {"outputs": ("y", "mi", "sum"), "epsilon": 1e-5},
        {"with_positions": (3, 7), "with_mask": False},
        {"with_positions": (1, 7), "mask_index_type": 0},
        {"outputs": ("y", "", "sum")},
    ],
)
def test_embed_layer_normalization(kwargs):
    data, feeds = _embed_model(**kwargs)
    _check(data, feeds, **SUMS)


def _quantized_table(a: np.ndarray):
    """uint8 values, scale and zero point of ``a`` over its range widened to hold 0."""
    lo, hi = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    scale = np.float32((hi - lo) / 255)
    zero = np.uint8(round(-lo / scale))
    return np.clip(np.round(a / scale) + zero, 0, 255).astype(np.uint8), scale, zero


@pytest.mark.parametrize("with_segment", [True, False])
def test_quantized_embed_layer_normalization(with_segment):
    b, s = 2, 6
    feeds = {"ids": _ids(VOCAB, b, s), "mask": RNG.choice(np.array([0, 1, 2], np.int32), (b, s))}
    if with_segment:
        feeds["seg"] = _ids(2, b, s)
    shapes = {
        "words": (VOCAB, H),
        "positions": (POSITIONS, H),
        "segments": (2, H),
        "gamma": (H,),
        "beta": (H,),
    }
    inits = []
    for name, shape in shapes.items():
        q, scale, zero = _quantized_table(normal(RNG, *shape))
        inits += [(name, q), (name + "_s", scale), (name + "_z", zero)]
    tables = [k if with_segment or k != "segments" else "" for k in shapes]
    inputs = ["ids", "seg" if with_segment else "", *tables[:3], *tables[3:], "mask"]
    inputs += [t + "_s" if t else "" for t in tables] + [t + "_z" if t else "" for t in tables]
    n = node("QEmbedLayerNormalization", inputs, ["y", "mi"], epsilon=1e-5)
    data = contrib_model([n], feeds, ["y", ("mi", np.int32)], inits)
    _check(data, feeds, **SUMS)


def test_embed_layer_normalization_bad_mask_index_type_is_refused():
    data, _ = _embed_model(mask_index_type=3)
    with pytest.raises(UnsupportedOpError, match=r"EmbedLayerNormalization with mask_index_type=3"):
        offload.load(data)


# ---- quantized ------------------------------------------------------------------------------


def _q(dtype, *shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _steps_from_onnxruntime(data: bytes, feeds: dict, program=None) -> int:
    """The largest difference, in quantization steps, of offload's quantized outputs from
    onnxruntime's. Dequantize → float op → QuantizeLinear gives onnxruntime's values exactly on
    these ops: 0 steps measured over 30 random batches of each (uint8 and int8, x_scale 0.02 to
    0.5 for QLinearSoftmax)."""
    want = onnxruntime_run(data, feeds)
    program = program or offload.load(data)
    worst = 0
    for got in (offload.evaluate(program, feeds), _through_pte(program, feeds)):
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, (
                k,
                got[k].dtype,
                got[k].shape,
                v.shape,
            )
            worst = max(worst, int(np.abs(got[k].astype(np.int64) - v.astype(np.int64)).max()))
    return worst


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(
    "opset,axis,shape", [(13, -1, (4, 6, 10)), (13, 1, (4, 6, 10)), (12, 1, (4, 3, 5)), (12, None, (2, 3, 4))]
)
def test_qlinear_softmax(dtype, opset, axis, shape):
    feeds = {"x": _q(dtype, *shape)}
    # the scales and zero points onnxruntime's quantizer gives Softmax's output
    y_scale, y_zero = (1 / 256, np.uint8(0)) if dtype == np.uint8 else (1 / 256, np.int8(-128))
    inits = [("xs", np.float32(0.05)), ("xz", dtype(3)), ("ys", np.float32(y_scale)), ("yz", y_zero)]
    attrs = {"opset": opset} | ({"axis": axis} if axis is not None else {})
    data = contrib_model(
        [node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], **attrs)], feeds, [("y", dtype)], inits
    )
    assert _steps_from_onnxruntime(data, feeds) == 0


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_where(dtype):
    feeds = {"c": RNG.random((3, 1, 8)) > 0.5, "x": _q(dtype, 3, 5, 8), "y": _q(dtype, 5, 1)}
    inits = [
        ("xs", np.float32(0.1)),
        ("xz", dtype(7)),
        ("ys", np.float32(0.03)),
        ("yz", dtype(-2 if dtype == np.int8 else 200)),
        ("zs", np.float32(0.13)),
        ("zz", dtype(10)),
    ]
    inputs = ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"]
    data = contrib_model([node("QLinearWhere", inputs, ["z"])], feeds, [("z", dtype)], inits)
    assert _steps_from_onnxruntime(data, feeds) == 0


@pytest.mark.parametrize("channels_last,dtype", [(1, np.uint8), (0, np.uint8), (1, np.int8)])
def test_qlinear_conv_channels_last(channels_last, dtype):
    x = _q(dtype, 1, 3, 7, 6)
    feeds = {"x": x.transpose(0, 2, 3, 1).copy() if channels_last else x}
    inits = [
        ("xs", np.float32(0.02)),
        ("xz", dtype(5)),
        # onnxruntime's u8 x s8 products saturate pair sums to int16 (test_onnx_contrib_quant.py):
        # weights in [-64, 63] keep every pair sum within it
        ("w", RNG.integers(-64, 64, (4, 3, 3, 3)).astype(np.int8)),
        ("ws", (RNG.random(4) * 0.01 + 0.005).astype(np.float32)),
        ("wz", np.zeros(4, np.int8)),
        ("ys", np.float32(0.05)),
        ("yz", dtype(-3 if dtype == np.int8 else 120)),
        ("b", RNG.integers(-500, 500, 4).astype(np.int32)),
    ]
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1], "kernel_shape": [3, 3], "channels_last": channels_last}
    data = contrib_model(
        [node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)],
        feeds,
        [("y", dtype)],
        inits,
    )
    program = offload.load(data)
    ops = [(op.domain, op.op_type) for op in program.main.body.operations]
    assert ("", "QLinearConv") in ops and ("com.microsoft", "QLinearConv") not in ops
    assert _steps_from_onnxruntime(data, feeds, program) == 0


# ---- float ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs,with_c",
    [
        ({"activation": "Relu", "transB": 1, "alpha": 0.5, "beta": 2.0}, True),
        ({"activation": "LeakyRelu", "activation_alpha": 0.2, "transA": 1}, True),
        ({"activation": "LeakyRelu", "activation_alpha": 0.05}, False),
        ({"activation": "Elu", "activation_alpha": 0.7}, True),
        ({"activation": "ThresholdedRelu", "activation_alpha": 0.4}, True),
        ({"activation": "Selu", "activation_alpha": 1.5, "activation_gamma": 1.1}, False),
        ({"activation": "Softsign"}, True),
        ({"activation": "Softplus"}, True),
        ({"activation": "ParametricSoftplus", "activation_alpha": 0.8, "activation_beta": 1.3}, True),
        ({"activation": "ScaledTanh", "activation_alpha": 1.7, "activation_beta": 0.6}, True),
        ({"activation": "HardSigmoid", "activation_alpha": 0.3, "activation_beta": 0.4}, True),
        ({"activation": "Tanh"}, True),
        ({"activation": "Sigmoid", "transA": 1, "transB": 1}, False),
        ({"activation": "Relu"}, True),
    ],
)
def test_fused_gemm(attrs, with_c):
    a_shape = (6, 5) if attrs.get("transA") else (5, 6)
    b_shape = (4, 6) if attrs.get("transB") else (6, 4)
    feeds = {"a": normal(RNG, *a_shape)}
    inits = [("b", normal(RNG, *b_shape)), ("c", normal(RNG, 4))]
    data = contrib_model(
        [node("FusedGemm", ["a", "b", "c"] if with_c else ["a", "b"], ["y"], **attrs)], feeds, ["y"], inits
    )
    _check(data, feeds, **SUMS)


def test_fused_gemm_activation_without_its_parameter_is_refused():
    feeds = {"a": normal(RNG, 2, 3)}
    data = contrib_model(
        [node("FusedGemm", ["a", "b"], ["y"], activation="HardSigmoid", activation_alpha=0.2)],
        feeds,
        ["y"],
        [("b", normal(RNG, 3, 2))],
    )
    with pytest.raises(UnsupportedOpError, match=r"FusedGemm activation HardSigmoid without activation_beta"):
        offload.load(data)


def test_fused_gemm_unknown_activation_is_refused():
    feeds = {"a": normal(RNG, 2, 3)}
    data = contrib_model(
        [node("FusedGemm", ["a", "b"], ["y"], activation="Swish")], feeds, ["y"], [("b", normal(RNG, 3, 2))]
    )
    with pytest.raises(
        UnsupportedOpError, match=r"FusedGemm activation 'Swish' \(one of Relu, .*\) is not supported"
    ):
        offload.load(data)


@pytest.mark.parametrize("upper,k", [(1, None), (0, None), (1, 2), (0, -1)])
def test_trilu(upper, k):
    feeds = {"x": normal(RNG, 2, 4, 5)}
    inits = [("k", np.int64(k))] if k is not None else []
    data = contrib_model(
        [node("Trilu", ["x", "k"] if k is not None else ["x"], ["y"], upper=upper)], feeds, ["y"], inits
    )
    _check(data, feeds, rtol=0, atol=0)


@pytest.mark.parametrize(
    "dtype,shape", [(np.float32, (3, 3)), (np.float32, (2, 4, 5, 5)), (np.float64, (4, 4))]
)
def test_inverse(dtype, shape):
    n = shape[-1]
    feeds = {"x": (RNG.standard_normal(shape) + n * np.eye(n)).astype(dtype)}  # well conditioned
    data = contrib_model([node("Inverse", ["x"], ["y"])], feeds, [("y", dtype)])
    _check(data, feeds, **SUMS)


def test_inverse_of_a_singular_matrix_is_an_error():
    feeds = {"x": np.ones((2, 3, 3), np.float32)}
    program = offload.load(contrib_model([node("Inverse", ["x"], ["y"])], feeds, ["y"]))
    with pytest.raises(KernelError, match=r"Inverse: X holds a singular matrix"):
        offload.evaluate(program, feeds)


def test_qlinear_softmax_axis_out_of_range_is_refused():
    feeds = {"x": _q(np.uint8, 2, 3)}
    inits = [("s", np.float32(0.1)), ("z", np.uint8(0))]
    n = node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], opset=13, axis=2)
    data = contrib_model([n], feeds, [("y", np.uint8)], inits)
    with pytest.raises(UnsupportedOpError, match=r"QLinearSoftmax with axis=2 for an input of rank 2"):
        offload.load(data)


def test_missing_required_attribute_names_the_node():
    feeds = {"x": _q(np.uint8, 2, 3)}
    inits = [("s", np.float32(0.1)), ("z", np.uint8(0))]
    data = contrib_model(
        [node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"])], feeds, [("y", np.uint8)], inits
    )
    with pytest.raises(ModelFormatError, match=r"QLinearSoftmax has no attribute 'opset'"):
        offload.load(data)


@needs_opencl
def test_embed_layer_normalization_fused_gemm_and_trilu_on_opencl(tmp_path):
    data, feeds = _embed_model(with_mask=False, outputs=("y", ""))
    want = onnxruntime_run(data, feeds)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path)
    assert "EmbedLayerNormalization" not in [op.op_type for op in lowered.main.body.operations]
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)

    feeds = {"a": normal(RNG, 5, 6)}
    nodes = [
        node("FusedGemm", ["a", "b", "c"], ["g"], activation="LeakyRelu", activation_alpha=0.1, transB=1),
        node("Trilu", ["g"], ["y"], upper=0),
    ]
    data = contrib_model(nodes, feeds, ["y"], [("b", normal(RNG, 4, 6)), ("c", normal(RNG, 4))])
    want = onnxruntime_run(data, feeds)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
