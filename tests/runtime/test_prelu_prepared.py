"""PRelu's prepared call (a select on the bits) and its kernel: each element is x or x · slope,
bit for bit as ONNX defines it (numpy's ``where`` on the same float32 products), signed zeros,
infinities and NaN included, and against onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload import runtime
from offload.runtime.kernels.elementwise import _PReluCall

RNG = np.random.default_rng(20261127)


def _x(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1e-45]
    return x


def _bits(a):
    return np.asarray(a).view(np.uint32)


@pytest.mark.parametrize("high", [1.0, 3.0], ids=["slopes-up-to-1", "slopes-above-1"])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize(
    "slope_shape",
    [(4, 1, 1), (6,), (), (4, 5, 1)],
    ids=["per-channel-loop", "last-axis-loop", "one-slope-loop", "two-axes-bits"],
)
def test_prepared_call_is_where_bit_for_bit(high, in_place, slope_shape):
    x, slope = _x((1, 4, 5, 6)), RNG.uniform(-2, high, slope_shape).astype(np.float32)
    want = np.where(x < 0, x * slope, x)
    out = x.copy() if in_place else np.empty_like(x)
    _PReluCall().bind(out, out if in_place else x, slope)()
    np.testing.assert_array_equal(_bits(out), _bits(want))


def _model(x_shape, slope):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("PRelu", ["a", "slope"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
        [numpy_helper.from_array(slope, "slope"), numpy_helper.from_array(np.ones((), np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize(
    "x_shape", [[1, 8, 9, 7], ["N", 8, 9, 7]], ids=["static-prepared", "symbolic-kernel"]
)
def test_module_matches_onnxruntime_and_the_definition(x_shape):
    slope = RNG.uniform(-0.5, 0.5, (8, 1, 1)).astype(np.float32)
    data = _model(x_shape, slope)
    x = _x((1, 8, 9, 7))
    module = runtime.load(offload.save(offload.load(data)))
    for _ in range(2):  # the second run takes the bound calls
        got = module.run({"x": x})["y"]
    a = x + np.float32(1)
    np.testing.assert_array_equal(_bits(got), _bits(np.where(a < 0, a * slope, a)))
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.5])
@pytest.mark.parametrize(
    "x_shape", [[2, 6, 5, 4], ["N", 6, 5, 4]], ids=["static-prepared", "symbolic-kernel"]
)
def test_leaky_relu_matches_onnxruntime_and_the_definition(alpha, x_shape):
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "one"], ["a"]),
            helper.make_node("LeakyRelu", ["a"], ["y"], alpha=alpha),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape)],
        [numpy_helper.from_array(np.ones((), np.float32), "one")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    x = _x((2, 6, 5, 4))
    module = runtime.load(offload.save(offload.load(data)))
    for _ in range(3):  # the third run takes a symbolic model's shape specialization
        got = module.run({"x": x})["y"]
    a = x + np.float32(1)
    np.testing.assert_array_equal(_bits(got), _bits(np.where(a < 0, np.float32(alpha) * a, a)))
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
