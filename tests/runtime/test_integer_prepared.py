"""ConvInteger's prepared call (runtime/kernels/conv_integer_prepared.py) and MatMulInteger's
one float32 product where the weights' L1 norms bound every partial sum below 2**24
(``linalg.exact_product``): exact integers, against onnxruntime (ConvInteger, and uint8 x uint8
MatMulInteger, which it computes exactly) and numpy's int64 sums."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.conv_integer_prepared import _ConvIntegerCall
from offload.runtime.kernels.linalg import exact_product
from offload.runtime.steps import _PreparedStep

U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32
RNG = np.random.default_rng(23)


def _model(node, inputs, inits) -> bytes:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", I32, None)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _conv_int64(x, w, x_zero, w_zero, pad: int, stride: int) -> np.ndarray:
    """The convolution of (x − x_zero) with (w − w_zero) in int64, padded with x_zero."""
    xs = np.pad(x.astype(np.int64) - int(x_zero), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    wz = np.asarray(w_zero, np.int64).reshape((-1, 1, 1, 1) if np.ndim(w_zero) else ())
    ws = w.astype(np.int64) - wz
    m, _, kh, kw = ws.shape
    oh, ow = (xs.shape[2] - kh) // stride + 1, (xs.shape[3] - kw) // stride + 1
    y = np.zeros((x.shape[0], m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xs[:, :, i : i + stride * oh : stride, j : j + stride * ow : stride]
            y += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return y


def _conv_call(module):
    calls = [s.call for s in module.method("forward")._steps if isinstance(s, _PreparedStep)]
    (call,) = [c for c in calls if isinstance(c, _ConvIntegerCall)]
    return call


# 64 channels x 9 taps: 576 x 255 x 128 is past 2**24 (the kernel's float64), while int8 weights
# up to 24 in magnitude keep 255 x each channel's L1 norm below it (float32, exact); uint8
# weights of zero point 0 (a mean of 127 a tap) do not (float64).
@pytest.mark.parametrize("w_type,dtype,stride", [(I8, np.float32, 1), (U8, np.float64, 2)])
def test_conv_integer_prepared_matches_onnxruntime(w_type, dtype, stride):
    if w_type == I8:
        w, w_zero = RNG.integers(-24, 24, (16, 64, 3, 3), endpoint=True).astype(np.int8), -2
    else:
        w, w_zero = RNG.integers(0, 255, (16, 64, 3, 3), endpoint=True).astype(np.uint8), 0
    inits = {"w": w, "wz": np.array(w_zero, w.dtype)}
    node = helper.make_node(
        "ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1], strides=[stride] * 2
    )
    data = _model(node, [("x", U8, [1, 64, 9, 11]), ("xz", U8, [])], inits)
    module = offload.runtime.load(offload.save(offload.load(data)))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for zero in (0, 255, 131):  # the zero point is an input: every run may bring another
        feeds = {"x": RNG.integers(0, 255, (1, 64, 9, 11), endpoint=True).astype(np.uint8)}
        feeds["xz"] = np.array(zero, np.uint8)
        got = module.run(feeds)["y"]
        np.testing.assert_array_equal(got, session.run(None, feeds)[0])
        np.testing.assert_array_equal(got, _conv_int64(feeds["x"], w, zero, w_zero, 1, stride))
    assert _conv_call(module).weights[2].dtype == dtype


def test_conv_integer_prepared_with_a_zero_point_per_channel():
    w = RNG.integers(0, 255, (8, 12, 3, 3), endpoint=True).astype(np.uint8)
    inits = {"w": w, "wz": RNG.integers(100, 150, 8).astype(np.uint8)}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1])
    data = _model(node, [("x", U8, [2, 12, 6, 5]), ("xz", U8, [])], inits)
    module = offload.runtime.load(offload.save(offload.load(data)))
    feeds = {
        "x": RNG.integers(0, 255, (2, 12, 6, 5), endpoint=True).astype(np.uint8),
        "xz": np.array(7, np.uint8),
    }
    got = module.run(feeds)["y"]
    np.testing.assert_array_equal(got, _conv_int64(feeds["x"], w, 7, inits["wz"], 1, 1))
    assert _conv_call(module).weights[2].dtype == np.float32


def test_exact_product_in_one_float32_product_where_the_l1_norms_allow():
    """1024 rows of weights in [-7, 7]: the worst case 1024 x 255 x 7 stays below 2**24 only
    through the columns' L1 norms (sums of |w|); one float32 product, exact."""
    a = RNG.integers(-255, 255, (16, 1024), endpoint=True).astype(np.float32)
    w = RNG.integers(-7, 7, (1024, 50), endpoint=True).astype(np.float32)
    l1 = float(np.abs(w).sum(axis=0).max())
    assert 255 * l1 < 2**24 <= 1024 * 255 * 255
    y = exact_product(a, w, 255.0, l1)
    assert y.dtype == np.float32  # the one product; the sliced path sums in float64
    np.testing.assert_array_equal(y, a.astype(np.int64) @ w.astype(np.int64))
    assert exact_product(a, w, 255.0, 2**24).dtype == np.float64  # a norm too large: slices


def test_matmul_integer_of_uint8_weights_matches_onnxruntime():
    b = RNG.integers(100, 140, (1024, 64)).astype(np.uint8)
    inits = {"b": b, "bz": np.array(119, np.uint8)}
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    data = _model(node, [("a", U8, [16, 1024]), ("az", U8, [])], inits)
    module = offload.runtime.load(offload.save(offload.load(data)))
    feeds = {
        "a": RNG.integers(0, 255, (16, 1024), endpoint=True).astype(np.uint8),
        "az": np.array(3, np.uint8),
    }
    for _ in range(2):
        got = module.run(feeds)["y"]
        want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, (feeds["a"].astype(np.int64) - 3) @ (b.astype(np.int64) - 119))
