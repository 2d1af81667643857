"""com.microsoft MatMulNBits and GatherBlockQuantized as a dequantized constant and a MatMul or a
Gather (frontends/onnx_contrib_nbits.py), against onnxruntime running the same models: ones packed
here by the spec's layout, and ones written by onnxruntime's own MatMulNBitsQuantizer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.errors import ModelFormatError, UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.contrib_support import compare, contrib_model, node, onnxruntime_run

RNG = np.random.default_rng(11)
# onnxruntime dequantizes B and sums in float32 at accuracy levels 0 and 1 (and at 4 with float
# zero points): a sum of K ≤ 300 products of order 1, within K ulps of the result's magnitude.
FLOAT_PATH = {"rtol": 1e-5, "atol": 2e-5}


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Codes of ``bits`` bits packed into uint8 along the last axis, the first in the low bits."""
    per_byte = 8 // bits
    grouped = codes.astype(np.uint8).reshape(*codes.shape[:-1], -1, per_byte)
    out = np.zeros(grouped.shape[:-1], np.uint8)
    for i in range(per_byte):
        out |= grouped[..., i] << np.uint8(i * bits)
    return out


def nbits_model(
    k, n, bits, block, zero=None, bias=False, g_idx=None, level=0, m=3, b_shape=None, scales=None
):
    """A one-node MatMulNBits model; the float64 weight [K, N] it holds (spec's formula); feeds."""
    blocks = -(-k // block)
    codes = RNG.integers(0, 1 << bits, (n, blocks * block))
    b = pack(codes, bits).reshape(b_shape or (n, blocks, block * bits // 8))
    scale = RNG.random((n, blocks)) * 0.1 + 0.01
    inits = [("B", b), ("scales", (scale if scales is None else scales).astype(np.float32).reshape(-1))]
    inputs = ["a", "B", "scales"]
    zp = np.full((n, blocks), 1 << (bits - 1), np.float64)
    if zero == "uint8":
        width = -(-blocks * bits // 8) * 8 // bits
        zcodes = RNG.integers(0, 1 << bits, (n, width))
        zp = zcodes[:, :blocks].astype(np.float64)
        inits.append(("zero", pack(zcodes, bits).reshape(-1)))
    elif zero == "float":
        zp = (RNG.random((n, blocks)) * (1 << bits)).astype(np.float32).astype(np.float64)
        inits.append(("zero", zp.astype(np.float32)))
    inputs.append("zero" if zero else "")
    group = np.arange(k) // block
    if g_idx is not None:
        group = g_idx
        inits.append(("g_idx", g_idx.astype(np.int32)))
    inputs.append("" if g_idx is None else "g_idx")
    if bias:
        inits.append(("bias", RNG.standard_normal(n).astype(np.float32)))
        inputs.append("bias")
    while inputs[-1] == "":
        inputs.pop()
    scale64 = scale.astype(np.float32).astype(np.float64)
    weight = ((codes[:, :k] - zp[:, group]) * scale64[:, group]).T
    feeds = {"a": RNG.standard_normal((2, m, k)).astype(np.float32)}
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": level}
    data = contrib_model([node("MatMulNBits", inputs, ["y"], **attrs)], feeds, ["y"], inits)
    return data, weight, feeds


def _ops(data: bytes) -> list[str]:
    return [op.op_type for op in offload.load(data).main.body.operations]


@pytest.mark.parametrize(
    "k,n,bits,block,zero,bias",
    [
        (64, 8, 4, 16, None, False),
        (100, 12, 4, 32, "uint8", True),  # K not a multiple of block_size: the last block padded
        (100, 12, 4, 32, "float", False),
        (300, 10, 4, 128, "uint8", True),
        (96, 6, 8, 32, None, True),
        (96, 6, 8, 64, "uint8", False),
        (80, 5, 2, 16, "uint8", True),
        (80, 5, 2, 256, "float", False),
    ],
)
def test_matmul_nbits_against_onnxruntime(k, n, bits, block, zero, bias):
    data, weight, feeds = nbits_model(k, n, bits, block, zero, bias)
    assert _ops(data) == (["MatMul", "Add"] if bias else ["MatMul"])
    got = compare(data, feeds, **FLOAT_PATH)
    want = feeds["a"].astype(np.float64) @ weight
    if not bias:  # and against the spec's formula in float64
        np.testing.assert_allclose(got["y"], want, **FLOAT_PATH)


def test_matmul_nbits_accuracy_level_1_and_float_zero_points_at_4():
    for level, zero in ((1, "uint8"), (4, "float")):
        data, _, feeds = nbits_model(100, 12, 4, 32, zero, True, level=level)
        compare(data, feeds, **FLOAT_PATH)


@pytest.mark.parametrize("bits,zero", [(4, "uint8"), (4, None), (8, "uint8"), (2, None)])
def test_matmul_nbits_accuracy_level_4_is_within_activation_rounding(bits, zero):
    """At accuracy_level 4 onnxruntime's CPU kernel (x86-64 here) rounds A to int8 per block of K
    (step max|a| / 127); offload keeps A in float at every level. The two then differ by at most
    |A - A_int8| @ |W|: measured 0.4-0.7 % of the largest output for 2, 4 and 8 bits, where
    offload stays within float32 rounding of the float64 product."""
    k, n, block = 128, 16, 32
    data, weight, feeds = nbits_model(k, n, bits, block, zero, level=4)
    want = onnxruntime_run(data, feeds)["y"].astype(np.float64)
    got = offload.evaluate(offload.load(data), feeds)["y"].astype(np.float64)
    a = feeds["a"].astype(np.float64).reshape(2, 3, k // block, block)
    step = np.abs(a).max(axis=-1, keepdims=True) / 127
    rounded = (np.round(a / step) * step).reshape(2, 3, k)
    bound = np.abs(feeds["a"] - rounded) @ np.abs(weight)
    assert np.all(np.abs(got - want) <= bound * 1.01 + 1e-4)
    np.testing.assert_allclose(got, feeds["a"].astype(np.float64) @ weight, **FLOAT_PATH)


def _half(data: bytes, feeds: dict) -> tuple[bytes, dict]:
    """The model with its float32 initializers, inputs and outputs in float16."""
    model = onnx.load_from_string(data)
    for t in model.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in [*model.graph.input, *model.graph.output]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    half = {k: v.astype(np.float16) for k, v in feeds.items() if v.dtype == np.float32}
    return model.SerializeToString(), feeds | half


@pytest.mark.parametrize("zero", [None, "uint8", "float"])
def test_matmul_nbits_float16(zero):
    """float16 A, scales and bias: the weight is dequantized in float32 and stored as float16;
    measured within 1-2 float16 steps (2^-10 relative) of onnxruntime's float16 result."""
    data, _, feeds = nbits_model(100, 12, 4, 32, zero, bias=True)
    compare(*_half(data, feeds), rtol=2e-3, atol=4e-3)
    data, feeds = _gather_model("uint8", (10, 48), 4, 16, 1, 0, True)
    compare(*_half(data, feeds), rtol=0, atol=0)


def test_matmul_nbits_g_idx():
    k, block = 64, 16
    g_idx = RNG.permutation(k) // block
    for zero in (None, "float"):
        data, weight, feeds = nbits_model(k, 8, 4, block, zero, g_idx=g_idx)
        got = compare(data, feeds, **FLOAT_PATH)
        np.testing.assert_allclose(got["y"], feeds["a"].astype(np.float64) @ weight, **FLOAT_PATH)
    data, _, _ = nbits_model(k, 8, 4, block, "uint8", g_idx=g_idx)
    with pytest.raises(UnsupportedOpError, match="g_idx 'g_idx' and packed uint8 zero_points"):
        offload.load(data)


@pytest.mark.parametrize(
    "change,error,message",
    [
        (
            {"b_shape": (8, 2, 16)},
            ModelFormatError,
            r"B 'B' of uint8 \[8, 2, 16\]: uint8 \[8, 4, 8\] expected",
        ),
        ({"bits": 3}, UnsupportedOpError, "MatMulNBits with bits 3"),
        ({"block": 24}, ModelFormatError, "block_size 24: a power of two and at least 16"),
        ({"block": 8}, ModelFormatError, "block_size 8: a power of two and at least 16"),
        (
            {"scales": np.ones((8, 3))},
            ModelFormatError,
            r"scales of shape \[24\]: \[8, 4\] or \[32\] expected",
        ),
    ],
)
def test_matmul_nbits_bad_input(change, error, message):
    args = {"k": 64, "n": 8, "bits": 4, "block": 16} | change
    if args["bits"] == 3 or args["block"] == 24:  # a shape the packing helper can fill
        data, _, _ = nbits_model(64, 8, 4, 16)
        model = onnx.load_from_string(data)
        for a in model.graph.node[0].attribute:
            if a.name in ("bits", "block_size"):
                a.i = args["bits"] if a.name == "bits" else args["block"]
        data = model.SerializeToString()
    else:
        data, _, _ = nbits_model(**args)
    with pytest.raises(error, match=message):
        offload.load(data)


def _fed(data: bytes, feeds: dict, names) -> tuple[bytes, dict]:
    """The model with the initializers ``names`` turned into graph inputs, and feeds holding them."""
    model = onnx.load_from_string(data)
    feeds = dict(feeds)
    for t in [t for t in model.graph.initializer if t.name in names]:
        model.graph.initializer.remove(t)
        feeds[t.name] = numpy_helper.to_array(t)
        model.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return model.SerializeToString(), feeds


@pytest.mark.parametrize("bits,zero", [(4, "uint8"), (2, "float"), (8, None)])
def test_matmul_nbits_weights_given_at_run_time(bits, zero):
    """B, scales and zero points fed at run time dequantize with ONNX ops in the run."""
    data, _, feeds = nbits_model(100, 12, bits, 32, zero, bias=True)
    data, feeds = _fed(data, feeds, {"B", "scales", "zero"})
    ops = _ops(data)
    assert "MatMul" in ops and ("BitShift" in ops) == (bits < 8)
    compare(data, feeds, **FLOAT_PATH)


def test_matmul_nbits_g_idx_given_at_run_time_is_refused():
    data, _, feeds = nbits_model(64, 8, 4, 16, g_idx=RNG.permutation(64) // 16)
    data, _ = _fed(data, feeds, {"g_idx"})
    with pytest.raises(UnsupportedOpError, match="MatMulNBits with g_idx 'g_idx' computed at run time"):
        offload.load(data)


def _gather_model(kind, shape, bits, block, quant, gather, zero):
    blocks = list(shape)
    blocks[quant] = -(-shape[quant] // block)
    scales = (RNG.random(blocks) * 0.1 + 0.01).astype(np.float32)
    if kind == "uint8":
        codes = RNG.integers(0, 1 << bits, shape)
        data = pack(codes, bits) if bits < 8 else codes.astype(np.uint8)
        zcodes = RNG.integers(0, 1 << bits, [*blocks[:-1], -(-blocks[-1] * bits // 8) * 8 // bits])
        zeros = pack(zcodes, bits) if bits < 8 else zcodes.astype(np.uint8)
    else:
        low, high, dtype = (-8, 8, ml_dtypes.int4) if kind == "int4" else (0, 16, ml_dtypes.uint4)
        data = RNG.integers(low, high, shape).astype(dtype)
        zeros = RNG.integers(low, high, blocks).astype(dtype)
    inits = [("data", data), ("scales", scales)] + ([("zeros", zeros)] if zero else [])
    feeds = {"i": RNG.integers(-shape[gather], shape[gather], (3, 2)).astype(np.int64)}
    inputs = ["data", "i", "scales"] + (["zeros"] if zero else [])
    attrs = {"bits": bits, "block_size": block, "quantize_axis": quant, "gather_axis": gather}
    return contrib_model([node("GatherBlockQuantized", inputs, ["y"], **attrs)], feeds, ["y"], inits), feeds


@pytest.mark.parametrize("zero", [False, True])
@pytest.mark.parametrize(
    "kind,shape,bits,block,quant,gather",
    [
        ("uint8", (10, 48), 4, 16, 1, 0),
        ("uint8", (10, 40), 8, 16, 1, 0),
        ("uint8", (10, 64), 2, 32, 1, 0),
        ("uint8", (3, 10, 40), 4, 16, 2, 0),
        ("int4", (10, 40), 4, 16, 1, 0),
        ("uint4", (10, 40), 4, 16, -1, 0),
        ("int4", (40, 10), 4, 16, 0, 1),
        ("int4", (40, 10), 4, 16, 0, 0),
        ("uint4", (4, 40, 6), 4, 32, 1, 2),
    ],
)
def test_gather_block_quantized_against_onnxruntime(kind, shape, bits, block, quant, gather, zero):
    data, feeds = _gather_model(kind, shape, bits, block, quant, gather, zero)
    assert _ops(data)[-1] == "Gather" and "GatherBlockQuantized" not in _ops(data)
    compare(data, feeds, rtol=0, atol=0)  # (code - zero point) * scale, one rounding either side


def test_gather_block_quantized_index_out_of_range_reads_zeros():
    """onnxruntime gives zeros for an index outside [-s, s), where ONNX Gather refuses it."""
    data, _ = _gather_model("int4", (40, 10), 4, 16, 0, 1, True)
    feeds = {"i": np.array([[-11, -10], [-1, 9], [10, 1 << 40]], np.int64)}
    y = compare(data, feeds, rtol=0, atol=0)["y"]
    assert not y[:, 0, 0].any() and not y[:, 2].any() and y[:, 0, 1].any() and y[:, 1].any()


def test_gather_block_quantized_bad_input():
    data, _ = _gather_model("uint8", (10, 48), 4, 16, 1, 0, True)
    model = onnx.load_from_string(data)
    (scales,) = [t for t in model.graph.initializer if t.name == "scales"]
    scales.CopyFrom(numpy_helper.from_array(np.ones((10, 4), np.float32), "scales"))
    with pytest.raises(ModelFormatError, match=r"scales 'scales' of shape \[10, 4\]: \[10, 3\] expected"):
        offload.load(model.SerializeToString())
    data, _ = _gather_model("uint8", (10, 48), 4, 16, 1, 0, False)
    model = onnx.load_from_string(data)
    model.graph.node[0].attribute.append(helper.make_attribute("gather_axis", 1))
    del model.graph.node[0].attribute[3]
    with pytest.raises(ModelFormatError, match="packs 4-bit codes in uint8 but gathers along axis 1"):
        offload.load(model.SerializeToString())


def _float_model() -> onnx.ModelProto:
    """Gather from an embedding table, then a MatMul: what onnxruntime's quantizer rewrites."""
    table = RNG.standard_normal((20, 64)).astype(np.float32)
    weight = RNG.standard_normal((64, 24)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),
        helper.make_node("MatMul", ["e", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 24])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("symmetric", [False, True])
def test_models_quantized_by_onnxruntime(symmetric):
    pytest.importorskip(
        "onnx_ir", reason="onnxruntime's MatMulNBitsQuantizer imports onnx-ir (offload[test] has it)"
    )
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        _float_model(), block_size=32, is_symmetric=symmetric, op_types_to_quantize=("MatMul", "Gather")
    )
    quantizer.process()
    data = quantizer.model.model.SerializeToString()
    written = sorted(n.op_type for n in quantizer.model.model.graph.node)
    assert written == ["GatherBlockQuantized", "MatMulNBits"]
    assert [op for op in _ops(data) if op in ("Gather", "MatMul")] == ["Gather", "MatMul"]
    assert not {"GatherBlockQuantized", "MatMulNBits"} & set(_ops(data))
    compare(data, {"ids": RNG.integers(0, 20, (2, 3)).astype(np.int64)}, **FLOAT_PATH)


@needs_opencl
def test_matmul_nbits_lowered_to_opencl(tmp_path):
    """The dequantized weight is an ordinary constant: the MatMul and the bias Add go to the
    delegate whole."""
    data, _, feeds = nbits_model(100, 12, 4, 32, "uint8", bias=True)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    np.testing.assert_allclose(got["y"], onnxruntime_run(data, feeds)["y"], **FLOAT_PATH)
