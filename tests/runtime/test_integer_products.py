"""MatMulInteger and ConvInteger: exact integer sums from float32 products (slices of the inner
axis short enough that every partial sum stays below 2**24, ``linalg.exact_product``; float32
convolutions where the whole sum fits), at sizes that need one slice and several;
MatMulInteger's prepared call with constant weights. References: numpy's int64 product, and
onnxruntime where its kernel is exact (uint8 x uint8, and ConvInteger; its uint8 x int8
MatMulInteger sums pairs of products in int16 with saturation on CPUs without VNNI, as on this
project's machines)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.linalg import _MatMulIntegerCall
from offload.runtime.steps import _PreparedStep

U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def _run_both(nodes, inputs, output, inits, feeds):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(output, I32, None)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    module = offload.runtime.load(offload.save(offload.load(data)))
    return module, module.run(feeds)[output], want


@pytest.mark.parametrize("k", [16, 1024])  # one slice; four (255 · 255 · 258 is past 2**24)
@pytest.mark.parametrize("b_type", [U8, I8])
def test_matmul_integer_with_constant_weights_is_exact(k, b_type):
    rng = np.random.default_rng(k)
    b_np = np.uint8 if b_type == U8 else np.int8
    info = np.iinfo(b_np)
    inits = {
        "b": rng.integers(info.min, info.max, (k, 40), endpoint=True).astype(b_np),
        "bz": np.array(info.max if b_type == U8 else -3, b_np),  # far from the values: large terms
    }
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])]
    inputs = [("a", U8, [3, 5, k]), ("az", U8, [])]
    module, got, want = None, None, None
    for _ in range(2):
        feeds = {
            "a": rng.integers(0, 255, (3, 5, k), endpoint=True).astype(np.uint8),
            "az": np.array(0, np.uint8),
        }
        module, got, want = _run_both(nodes, inputs, "y", inits, feeds)
        np.testing.assert_array_equal(
            got, feeds["a"].astype(np.int64) @ (inits["b"] - inits["bz"].astype(np.int64))
        )
        if b_type == U8:
            np.testing.assert_array_equal(got, want)
    steps = module.method("forward")._steps
    assert any(isinstance(s, _PreparedStep) and isinstance(s.call, _MatMulIntegerCall) for s in steps)


@pytest.mark.parametrize("channels", [4, 96])  # float32 sums; past 2**24, float64
def test_conv_integer_is_exact(channels):
    rng = np.random.default_rng(channels)
    inits = {"w": rng.integers(-128, 127, (8, channels, 3, 3), endpoint=True).astype(np.int8)}
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])]
    feeds = {
        "x": rng.integers(0, 255, (1, channels, 9, 7), endpoint=True).astype(np.uint8),
        "xz": np.array(255, np.uint8),
    }
    _, got, want = _run_both(nodes, [("x", U8, [1, channels, 9, 7]), ("xz", U8, [])], "y", inits, feeds)
    np.testing.assert_array_equal(got, want)
