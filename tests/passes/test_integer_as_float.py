"""quantization::integer_as_float: a TFLite int8 model with float activations, int8 only at its edges.

The values are checked against LiteRT in tests/frontends/test_tflite.py (on opencl); here the
rewrite's shape: which ops remain, that the interface keeps its int8 types, and the negative
cases (an ONNX model's quantization and plain int8 arithmetic are not touched)."""

from pathlib import Path

import numpy as np
from onnx import TensorProto

import offload
from offload.passes.quantization.integer_as_float import integer_as_float

from .helpers import F32, model, node, onnxruntime_run, op_types, optimized, rand

P = ["quantization::integer_as_float"]
FIXTURES = Path(__file__).resolve().parents[1] / "frontends" / "tflite"
I8 = TensorProto.INT8


def test_integer_ops_and_inner_quantization_become_float():
    program = offload.load(FIXTURES / "cnn_int8.tflite")
    out = offload.optimize(program, P, verify_each=True)
    body = out.main.body.operations
    assert not any(op.domain for op in body)  # no offload.tflite op left
    types = op_types(out)
    assert "QuantizeLinear" not in types and "DequantizeLinear" not in types
    assert types["Conv"] == 4 and types["HardSwish"] == types["LeakyRelu"] == types["Tanh"] == 1
    convs = [op for op in body if op.op_type == "Conv"]
    assert all(op.inputs[1].const_value.dtype == np.float32 for op in convs)  # dequantized once
    inside = [v for op in body for v in op.outputs if op.op_type not in ("Cast",)]
    assert all(v.type.dtype == offload.ir.DataType.FLOAT for v in inside)  # activations float
    (x,), (y,) = out.main.inputs, out.main.outputs
    assert x.type.dtype.name == y.type.dtype.name == "INT8"
    assert [v.name for v in out.main.outputs] == [v.name for v in program.main.outputs]
    # the edges: one dequantization (Cast, Sub, Mul) and one quantization (…, Clip, Cast)
    assert x.uses[0][0].op_type == "Cast" and y.producer.op_type == "Cast"
    assert y.producer.inputs[0].producer.op_type == "Clip"


def test_the_cpu_path_keeps_the_integer_ops():
    program = offload.load(FIXTURES / "elementwise_int8.tflite")
    integer = [op.op_type for op in program.main.body.operations if op.domain == "offload.tflite"]
    assert {"Div", "SquaredDifference", "Sum", "Lookup"} <= set(integer)
    assert integer_as_float(program) and not any(op.domain for op in program.main.body.operations)


def test_an_onnx_quantize_dequantize_model_is_left_alone():
    data = model(
        [
            node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        {"x": (F32, [2, 3])},
        {"y": (F32, None)},
        {"s": np.float32(0.1), "z": np.int8(3)},
    )
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
    x = rand(2, 3)
    np.testing.assert_array_equal(offload.evaluate(out, {"x": x})["y"], onnxruntime_run(data, {"x": x})["y"])


def test_plain_int8_arithmetic_is_left_alone():
    data = model([node("Max", ["a", "b"], ["y"])], {"a": (I8, [4]), "b": (I8, [4])}, {"y": (I8, None)})
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
