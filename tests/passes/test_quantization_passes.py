"""optimize_quantization::{dequantize_quantize_pair_elimination, int_op_canonicalization,
nullify_redundant_quantization_zero_point}."""

import numpy as np
import pytest
from onnx import TensorProto

from .helpers import F32, check, model, node, op_types, optimized, rand

I64 = np.int64
U8, I8, I16 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT16
PAIR = ["optimize_quantization::dequantize_quantize_pair_elimination"]
INT_OP = ["optimize_quantization::int_op_canonicalization"]
ZERO = ["optimize_quantization::nullify_redundant_quantization_zero_point"]
NP = {U8: np.uint8, I8: np.int8, I16: np.int16}


def _ints(dtype, shape, seed=0):
    info = np.iinfo(NP[dtype])
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(NP[dtype])


def _round_trip(dtype=U8, scale=0.037, zp=3, q_scale=None, q_zp=None, middle=None, shape=(2, 6)):
    nodes = [node("DequantizeLinear", ["q", "s", "z"], ["f"])]
    src = "f"
    if middle is not None:
        op, extra, attrs = middle
        nodes.append(node(op, ["f", *extra], ["m"], **attrs))
        src = "m"
    nodes += [node("QuantizeLinear", [src, "s2", "z2"], ["r"]), node("Identity", ["r"], ["y"])]
    inits = {
        "s": np.array(scale, np.float32),
        "z": np.array(zp, NP[dtype]),
        "s2": np.array(scale if q_scale is None else q_scale, np.float32),
        "z2": np.array(zp if q_zp is None else q_zp, NP[dtype]),
        "perm": np.array([3, 4], I64),
    }
    return model(nodes, {"q": (dtype, list(shape))}, {"y": (dtype, None)}, inits)


@pytest.mark.parametrize("dtype, scale, zp", [(U8, 0.037, 3), (I8, 1e-3, -5), (I16, 2.5e-4, 100)])
def test_dequantize_then_quantize_alike_is_the_integers(dtype, scale, zp):
    out = check(_round_trip(dtype, scale, zp), PAIR, {"q": _ints(dtype, (2, 6))}, rtol=0, atol=0)
    assert op_types(out) == {"Identity": 1}


def test_different_scale_or_zero_point_stays():
    for data in [_round_trip(q_scale=0.05), _round_trip(q_zp=4)]:
        out = check(data, PAIR, {"q": _ints(U8, (2, 6))}, rtol=0, atol=0)
        assert op_types(out)["QuantizeLinear"] == 1


@pytest.mark.parametrize(
    "middle",
    [
        ("Transpose", [], {"perm": [1, 0]}),
        ("Reshape", ["shape"], {}),
        ("Flatten", [], {"axis": 0}),
    ],
)
def test_data_movement_between_the_pair_runs_on_integers(middle):
    op = middle[0]
    data = _round_trip(I8, 0.02, -7, middle=middle)
    if op == "Reshape":  # the shape as an initializer
        from onnx import ModelProto, numpy_helper

        m = ModelProto.FromString(data)
        m.graph.initializer.append(numpy_helper.from_array(np.array([3, 4], I64), "shape"))
        data = m.SerializeToString()
    out = check(data, INT_OP, {"q": _ints(I8, (2, 6))}, rtol=0, atol=0)
    assert op_types(out) == {op: 1, "Identity": 1}


def test_arithmetic_between_the_pair_stays():
    data = _round_trip(I8, 0.02, -7, middle=("Relu", [], {}))
    out = check(data, INT_OP, {"q": _ints(I8, (2, 6))}, rtol=0, atol=0)
    assert op_types(out)["QuantizeLinear"] == 1


def _quantize(zp_dtype, zp_value, dequantize_after=False, dq_zp=None):
    nodes = [node("QuantizeLinear", ["x", "s", "z"], ["q"])]
    outputs = {"q": (zp_dtype, None)}
    inits = {"s": np.array(0.05, np.float32), "z": np.array(zp_value, NP[zp_dtype])}
    if dequantize_after:
        nodes.append(node("DequantizeLinear", ["q", "s", "z2"], ["y"]))
        inits["z2"] = np.array(zp_value if dq_zp is None else dq_zp, NP[zp_dtype])
        outputs = {"y": (F32, None)}
    return model(nodes, {"x": (F32, [3, 5])}, outputs, inits)


X = {"x": rand(3, 5, seed=2) * 4}


@pytest.mark.parametrize("zp_dtype", [U8, I8])
def test_zero_zero_points_are_dropped_keeping_the_type(zp_dtype):
    out = check(_quantize(zp_dtype, 0), ZERO, X, rtol=0, atol=0)
    (q,) = out.main.body.operations
    assert len([v for v in q.inputs if v is not None]) == 2


@pytest.mark.parametrize("zp_dtype, zp", [(U8, 128), (I8, -128)])
def test_a_128_shift_between_quantize_and_dequantize_goes(zp_dtype, zp):
    out = check(_quantize(zp_dtype, zp, dequantize_after=True), ZERO, X, rtol=0, atol=0)
    assert all(len([v for v in op.inputs if v is not None]) == 2 for op in out.main.body.operations)


@pytest.mark.parametrize("dtype, zp", [(I8, -128), (U8, 128)])
def test_a_constant_dequantized_with_128_moves_to_the_other_type(dtype, zp):
    data = model(
        [node("DequantizeLinear", ["c", "s", "z"], ["d"]), node("Add", ["d", "x"], ["y"])],
        {"x": (F32, [2, 6])},
        {"y": (F32, None)},
        {"c": _ints(dtype, (2, 6)), "s": np.array(0.1, np.float32), "z": np.array(zp, NP[dtype])},
    )
    out = check(data, ZERO, {"x": rand(2, 6)}, rtol=0, atol=0)
    dq = next(op for op in out.main.body.operations if op.op_type == "DequantizeLinear")
    assert dq.inputs[0].type.dtype.numpy != NP[dtype] and len([v for v in dq.inputs if v is not None]) == 2


def test_other_shifts_or_a_shared_quantized_value_stay():
    # a 100 zero point: nothing to drop
    _original, out = optimized(_quantize(U8, 100, dequantize_after=True), ZERO)
    assert all(len([v for v in op.inputs if v is not None]) == 3 for op in out.main.body.operations)
    # the quantized values are also an output: their type must stay uint8
    data = model(
        [node("QuantizeLinear", ["x", "s", "z"], ["q"]), node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        {"x": (F32, [3, 5])},
        {"q": (U8, None), "y": (F32, None)},
        {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8)},
    )
    out = check(data, ZERO, X, rtol=0, atol=0)
    assert all(len([v for v in op.inputs if v is not None]) == 3 for op in out.main.body.operations)


def _joined(q_scale=None, q_zp=None):
    """Two int8 tensors dequantized alike, joined, requantized (a streaming model's state update)."""
    nodes = [
        node("DequantizeLinear", ["a", "s", "z"], ["fa"]),
        node("DequantizeLinear", ["b", "s", "z"], ["fb"]),
        node("Concat", ["fa", "fb"], ["f"], axis=1),
        node("QuantizeLinear", ["f", "s2", "z2"], ["y"]),
    ]
    inits = {
        "s": np.array(0.1019, np.float32),
        "z": np.array(-128, np.int8),
        "s2": np.array(0.1019 if q_scale is None else q_scale, np.float32),
        "z2": np.array(-128 if q_zp is None else q_zp, np.int8),
    }
    return model(nodes, {"a": (I8, [1, 4, 32]), "b": (I8, [1, 1, 32])}, {"y": (I8, None)}, inits)


def test_a_concat_of_values_dequantized_alike_runs_on_integers():
    feeds = {"a": _ints(I8, (1, 4, 32), 1), "b": _ints(I8, (1, 1, 32), 2)}
    out = check(_joined(), INT_OP, feeds, rtol=0, atol=0)
    assert op_types(out) == {"Concat": 1}
    for data in [_joined(q_scale=0.2), _joined(q_zp=3)]:  # another scale or zero point: it rounds
        assert op_types(check(data, INT_OP, feeds, rtol=0, atol=0))["QuantizeLinear"] == 1


def test_split_pieces_each_requantized_alike_run_on_integers():
    nodes = [
        node("DequantizeLinear", ["q", "s", "z"], ["f"]),
        node("Split", ["f", "sizes"], ["f1", "f2"], axis=-1),
        node("QuantizeLinear", ["f1", "s", "z"], ["y1"]),
        node("QuantizeLinear", ["f2", "s", "z"], ["y2"]),
    ]
    inits = {"s": np.array(0.043, np.float32), "z": np.array(5, np.int8), "sizes": np.array([24, 40], I64)}
    data = model(nodes, {"q": (I8, [1, 9, 1, 64])}, {"y1": (I8, None), "y2": (I8, None)}, inits)
    out = check(data, INT_OP, {"q": _ints(I8, (1, 9, 1, 64), 3)}, rtol=0, atol=0)
    assert op_types(out) == {"Split": 1}
    # one piece read by something else as well: the floats stay
    nodes.append(node("Relu", ["f2"], ["r"]))
    data = model(
        nodes, {"q": (I8, [1, 9, 1, 64])}, {"y1": (I8, None), "y2": (I8, None), "r": (F32, None)}, inits
    )
    out = check(data, INT_OP, {"q": _ints(I8, (1, 9, 1, 64), 3)}, rtol=0, atol=0)
    assert op_types(out)["QuantizeLinear"] == 2
