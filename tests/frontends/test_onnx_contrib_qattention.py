"""com.microsoft::QAttention (frontends/onnx_contrib_quant.py: MatMulInteger, scaled to float, then
Attention's rewrite in onnx_contrib_attention.py) against onnxruntime's CPU kernel running the same
models, through offload.evaluate and a saved .pte.

The projection is an exact integer product on both sides; what differs is float32 rounding in
the scaling and the attention sums: measured at most 1.4e-6 absolute on these cases (outputs up
to 8; 4.8e-7 for the quantize_dynamic models), and 1.3e-5 relative over three draws of each,
where full-range uint8 weights make scores of order 100 and outputs of order 30."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import offload
from offload.errors import UnsupportedOpError
from tests.frontends.contrib_support import SUMS, attention_mask, contrib_model, node, onnxruntime_run

RNG = np.random.default_rng(2031)
B, S, HIDDEN, HEADS = 2, 5, 16, 4


def _ints(dtype, *shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def _weights(dtype, *shape) -> np.ndarray:
    """onnxruntime's uint8 x int8 products on x86-64 without VNNI (pmaddubsw) saturate each sum of
    two neighbouring products to int16 (its quantization docs say so); offload's sums are exact.
    int8 weights in [-64, 63] (onnxruntime's reduce_range) keep every pair sum within int16."""
    return RNG.integers(-64, 64, shape).astype(dtype) if dtype == np.int8 else _ints(dtype, *shape)


def _mask(kind: str, t: int) -> np.ndarray:
    return attention_mask(RNG, kind, B, S, t)
    m = (RNG.random((B, S, t)) > 0.3).astype(np.int32)
    m[..., 0] = 1
    return m


def _case(
    w_type=np.int8, per_column=False, zeros=True, mask=None, causal=0, past=0, x_type=np.uint8, **extra
):
    columns = 3 * HIDDEN if per_column else None
    shape = (columns,) if columns else ()
    feeds = {"x": _ints(x_type, B, S, HIDDEN)}
    inits = [
        ("w", _weights(w_type, HIDDEN, 3 * HIDDEN)),
        ("bias", RNG.standard_normal(3 * HIDDEN).astype(np.float32)),
        ("x_scale", np.array(0.02, np.float32)),
        ("w_scale", (RNG.random(shape) * 4e-3 + 1e-3).astype(np.float32)),
    ]
    inputs = ["x", "w", "bias", "x_scale", "w_scale", "", "", "", ""]
    if mask is not None:
        feeds["mask"] = _mask(mask, past + S)
        inputs[5] = "mask"
    if zeros:
        inits += [("x_zero", np.array(128, x_type) if x_type == np.uint8 else np.array(-3, x_type))]
        inits += [("w_zero", _ints(w_type, *shape) // 8)]
        inputs[6:8] = ["x_zero", "w_zero"]
    if past:
        feeds["past"] = RNG.standard_normal((2, B, HEADS, past, HIDDEN // HEADS)).astype(np.float32)
        inputs[8] = "past"
    while inputs[-1] == "":
        inputs.pop()
    outputs = ["y", "present"] if past else ["y"]
    attrs = {"num_heads": HEADS, "unidirectional": causal, **extra}
    n = node("QAttention", inputs, outputs, **attrs)
    return contrib_model([n], feeds, outputs, inits), feeds


def _check(data: bytes, feeds: dict, tmp_path, want: dict | None = None) -> None:
    """offload.evaluate and the saved .pte against onnxruntime (or ``want``)."""
    want = onnxruntime_run(data, feeds) if want is None else want
    program = offload.load(data)
    path = tmp_path / "qattention.pte"
    offload.save(program, str(path))
    for got in (offload.evaluate(program, feeds), offload.runtime.load(str(path)).run(feeds)):
        for name, value in want.items():
            assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
            np.testing.assert_allclose(got[name], value, err_msg=name, **SUMS)


@pytest.mark.parametrize(
    "w_type,per_column,zeros,mask,causal,past",
    [
        (np.int8, False, True, None, 0, 0),
        (np.uint8, True, True, "2d", 0, 0),
        (np.int8, True, False, "1d", 1, 0),
        (np.uint8, False, False, "1d_start", 0, 0),
        (np.int8, False, True, "3d", 0, 0),
        (np.int8, True, True, "2d", 1, 3),
        (np.uint8, False, True, "1d", 0, 2),
    ],
)
def test_q_attention(tmp_path, w_type, per_column, zeros, mask, causal, past):
    data, feeds = _case(w_type, per_column, zeros, mask, causal, past)
    _check(data, feeds, tmp_path)


def test_q_attention_scale_and_filter_value(tmp_path):
    data, feeds = _case(mask="2d", scale=0.3, mask_filter_value=-50.0)
    _check(data, feeds, tmp_path)


def test_q_attention_is_rewritten():
    data, _ = _case(mask="2d")
    ops = [op.op_type for op in offload.load(data).main.body.operations]
    assert "QAttention" not in ops and "MatMulInteger" in ops and "Attention" in ops


def test_int8_input_is_the_uint8_product(tmp_path):
    """onnxruntime's CPU has no int8-input kernel: x and its zero point moved by 128 to uint8 are
    the same real values, the same integer product, which onnxruntime then computes."""
    data, feeds = _case(x_type=np.int8, mask="2d")
    model = onnx.load_from_string(data)
    zero = next(i for i in model.graph.initializer if i.name == "x_zero")
    zero.CopyFrom(numpy_helper.from_array(np.array(-3 + 128, np.uint8), "x_zero"))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    shifted = {**feeds, "x": (feeds["x"].astype(np.int16) + 128).astype(np.uint8)}
    want = onnxruntime_run(model.SerializeToString(), shifted)
    _check(data, feeds, tmp_path, want)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dynamic_of_attention(tmp_path, per_channel):
    """A float com.microsoft::Attention (the node onnxruntime's transformer optimizer fuses a BERT
    layer's attention into) quantized by quantize_dynamic: DynamicQuantizeLinear, QAttention."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    feeds = {"x": RNG.standard_normal((B, S, HIDDEN)).astype(np.float32), "mask": _mask("2d", S)}
    inits = [
        ("w", (RNG.standard_normal((HIDDEN, 3 * HIDDEN)) * 0.3).astype(np.float32)),
        ("bias", RNG.standard_normal(3 * HIDDEN).astype(np.float32)),
    ]
    n = node("Attention", ["x", "w", "bias", "mask"], ["y"], num_heads=HEADS)
    (tmp_path / "float.onnx").write_bytes(contrib_model([n], feeds, ["y"], inits))
    quantized = tmp_path / "quantized.onnx"
    # reduce_range: 7-bit int8 weights, within int16 pair sums (see _weights)
    quantize_dynamic(
        tmp_path / "float.onnx",
        quantized,
        per_channel=per_channel,
        reduce_range=True,
        weight_type=QuantType.QInt8,
    )
    data = quantized.read_bytes()
    assert "QAttention" in data.decode("latin-1")
    _check(data, feeds, tmp_path)


@pytest.mark.parametrize(
    "attrs,what",
    [
        ({"do_rotary": 1}, "QAttention with do_rotary=1"),
        ({"past_present_share_buffer": 1}, "QAttention with past_present_share_buffer=1"),
        ({"num_heads": 3}, r"QAttention with num_heads=3 and Q, K, V widths \[16, 16, 16\]"),
    ],
)
def test_bad_attributes_are_refused(attrs, what):
    data, _ = _case(**attrs)
    with pytest.raises(UnsupportedOpError, match=what):
        offload.load(data)


def test_mixed_zero_point_type_is_refused():
    data, _ = _case(zeros=False)
    model = onnx.load_from_string(data)
    model.graph.initializer.append(numpy_helper.from_array(np.array(3, np.int8), "x_zero"))
    model.graph.node[0].input.extend(["", "x_zero"])
    with pytest.raises(UnsupportedOpError, match="QAttention with 'x' and zero point 'x_zero'"):
        offload.load(model.SerializeToString())
