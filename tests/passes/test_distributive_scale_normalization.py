"""optimize_quantization::distributive_quantized_binary_op_scale_normalization, against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto

from offload.runtime.evaluate import evaluate

from .helpers import F32, model, node, onnxruntime_run, optimized

P = ["optimize_quantization::distributive_quantized_binary_op_scale_normalization"]
U8 = TensorProto.UINT8


def _model(op="Add", sy=0.25, extra=False):
    nodes = [
        node("DequantizeLinear", ["x", "sx", "zx"], ["a"]),
        node("DequantizeLinear", ["y", "sy", "zy"], ["b"]),
        node(op, ["a", "b"], ["s"]),
        node("QuantizeLinear", ["s", "sz", "zz"], ["q"]),
    ]
    inits = {
        "sx": np.array(0.02, np.float32),
        "sy": np.array(sy, np.float32),
        "sz": np.array(0.5, np.float32),
        "zx": np.array(3, np.uint8),
        "zy": np.array(128, np.uint8),
        "zz": np.array(100, np.uint8),
    }
    outputs = {"q": (U8, None), **({"s": (F32, None)} if extra else {})}
    return model(nodes, {"x": (U8, [4, 64]), "y": (U8, [4, 64])}, outputs, inits)


def _feeds():
    rng = np.random.default_rng(0)
    return {k: rng.integers(0, 256, (4, 64)).astype(np.uint8) for k in ("x", "y")}


def _scales(program):
    return {
        op.op_type + str(i): float(op.inputs[1].const_value)
        for i, op in enumerate(program.main.body.operations)
        if op.op_type in ("DequantizeLinear", "QuantizeLinear")
    }


@pytest.mark.parametrize("op", ["Add", "Sub"])
def test_the_second_scale_becomes_one_and_the_integers_stay(op):
    data = _model(op)
    _, out = optimized(data, P)
    scales = _scales(out)
    assert sorted(scales.values()) == sorted([np.float32(0.02) / np.float32(0.25), 1.0, 2.0])
    feeds = _feeds()
    np.testing.assert_array_equal(evaluate(out, feeds)["q"], onnxruntime_run(data, feeds)["q"])


@pytest.mark.parametrize("case", ["scale not a power of two", "Mul", "sum read elsewhere"])
def test_it_stays(case):
    data = {
        "scale not a power of two": _model(sy=0.3),
        "Mul": _model("Mul"),
        "sum read elsewhere": _model(extra=True),
    }[case]
    original, out = optimized(data, P)
    assert _scales(out) == _scales(original)
