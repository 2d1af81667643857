"""Per-tensor 8-bit QuantizeLinear / DequantizeLinear prepared calls: the same integers and
floats as onnxruntime, rounding ties to even and saturating, through a static .pte."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.quantization import _DequantizeCall, _QuantizeCall
from offload.runtime.steps import _PreparedStep


def _model(zp: np.ndarray | None, scale: float) -> bytes:
    """y = Quantize(x + 0, s, zp); z = Dequantize(y, s, zp) * 1 (static shapes)."""
    inits = [
        numpy_helper.from_array(np.array(scale, np.float32), "s"),
        numpy_helper.from_array(np.zeros((), np.float32), "o"),
    ]
    q_in, dq_in = ["a", "s"], ["y", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        q_in, dq_in = [*q_in, "zp"], [*dq_in, "zp"]
    qtype = TensorProto.UINT8 if zp is None or zp.dtype == np.uint8 else TensorProto.INT8
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "o"], ["a"]),
            helper.make_node("QuantizeLinear", q_in, ["y"]),
            helper.make_node("DequantizeLinear", dq_in, ["z"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 257])],
        [
            helper.make_tensor_value_info("y", qtype, [4, 257]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 257]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
@pytest.mark.parametrize(
    "zp", [np.array(-7, np.int8), np.array(131, np.uint8), None], ids=["int8", "uint8", "no-zero-point"]
)
def test_prepared_quantize_and_dequantize_match_onnxruntime(zp, loops, monkeypatch):
    """By the compiled passes (``loops.quantize8``, ``loops.dequantize8``) and the numpy passes."""
    from offload.runtime.kernels import quantization

    if loops == "numpy":
        monkeypatch.setattr(quantization, "compiled_loops", lambda: None)
    scale = 0.0371
    data = _model(zp, scale)
    module = offload.runtime.load(offload.save(offload.load(data)))
    calls = [type(s.call) for s in module.method("forward")._steps if isinstance(s, _PreparedStep)]
    assert _QuantizeCall in calls and _DequantizeCall in calls
    rng = np.random.default_rng(11)
    x = rng.uniform(-8, 8, (4, 257)).astype(np.float32)
    x[0, :40] = (np.arange(40, dtype=np.float32) - 20 + 0.5) * np.float32(scale)  # ties, about
    x[1, :4] = [1e9, -1e9, np.inf, -np.inf]  # saturation
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(2):  # the second run takes the bound calls
        got = module.run({"x": x})
    want = dict(zip(["y", "z"], session.run(None, {"x": x})))
    np.testing.assert_array_equal(got["y"], want["y"])
    np.testing.assert_array_equal(got["z"], want["z"])


def test_quantize_and_dequantize_of_split_pieces_take_their_prepared_calls(monkeypatch):
    """Split's pieces along the last axis are strided views: QuantizeLinear and DequantizeLinear
    take them as they are (each element is rounded alone, so the layout cannot change a bit),
    without the kernel's way; the integers and floats are onnxruntime's."""
    inits = [
        numpy_helper.from_array(np.array(0.0371, np.float32), "s"),
        numpy_helper.from_array(np.array(-7, np.int8), "zp"),
        numpy_helper.from_array(np.array([3, 5], np.int64), "sizes"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=-1),
            helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["qa"]),
            helper.make_node("DequantizeLinear", ["qa", "s", "zp"], ["da"]),
            helper.make_node("QuantizeLinear", ["b", "s", "zp"], ["qb"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [
            helper.make_tensor_value_info("da", TensorProto.FLOAT, [4, 3]),
            helper.make_tensor_value_info("qb", TensorProto.INT8, [4, 5]),
        ],
        inits,
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    module = offload.runtime.load(offload.save(offload.load(data)))

    def refuse(self, frame, out):
        raise AssertionError(f"{self.kernel.op_name} took the kernel's way")

    monkeypatch.setattr(_PreparedStep, "_by_kernel", refuse)
    x = np.random.default_rng(12).uniform(-5, 5, (4, 8)).astype(np.float32)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = dict(zip(["da", "qb"], session.run(None, {"x": x})))
    for _ in range(2):
        got = module.run({"x": x})
        np.testing.assert_array_equal(got["da"], want["da"])
        np.testing.assert_array_equal(got["qb"], want["qb"])


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
def test_quantize_reads_its_scale_at_every_run_and_gives_nan_zero(loops, monkeypatch):
    """A scale given at run time (not a constant): each run's quantization uses that run's scale,
    by the compiled pass (``loops.quantize8``) and by the numpy passes alike; NaN gives 0, as
    numpy's conversion of it (onnxruntime leaves NaN unspecified)."""
    from offload.runtime.kernels import quantization

    if loops == "numpy":
        monkeypatch.setattr(quantization, "compiled_loops", lambda: None)
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "o"], ["a"]),
            helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 100]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [3, 100])],
        [
            numpy_helper.from_array(np.zeros((), np.float32), "o"),
            numpy_helper.from_array(np.array(3, np.int8), "zp"),
        ],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    module = offload.runtime.load(offload.save(offload.load(data)))
    assert _QuantizeCall in [
        type(s.call) for s in module.method("forward")._steps if isinstance(s, _PreparedStep)
    ]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(13).uniform(-6, 6, (3, 100)).astype(np.float32)
    for scale in (0.05, 0.013, 0.2, 0.05):
        feeds = {"x": x, "s": np.array(scale, np.float32)}
        np.testing.assert_array_equal(module.run(feeds)["y"], session.run(None, feeds)[0], err_msg=str(scale))
    x[1, 7] = np.nan
    y = module.run({"x": x, "s": np.array(0.05, np.float32)})["y"]
    assert y[1, 7] == 0


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
def test_dynamic_quantize_linear_matches_onnxruntime(loops, monkeypatch):
    """DynamicQuantizeLinear by the compiled call (``loops.dynamic_quantize8``) and by the numpy
    passes: onnxruntime's integers, scale and zero point, on inputs of either sign, all
    positive and all negative (the range always holds 0), and all zero (scale 1, not the
    formula's 0, which a later x / scale would divide by)."""
    from offload.runtime.kernels import quantization

    if loops == "numpy":
        monkeypatch.setattr(quantization, "compiled_loops", lambda: None)
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 333])],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, [6, 333]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("z", TensorProto.UINT8, []),
        ],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    module = offload.runtime.load(offload.save(offload.load(data)))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(15)
    for x in (
        rng.uniform(-3, 5, (6, 333)),
        rng.uniform(0.5, 2, (6, 333)),
        rng.standard_normal((6, 333)) * 40,
        rng.uniform(-2, -0.5, (6, 333)),
        np.zeros((6, 333)),
    ):
        feeds = {"x": x.astype(np.float32)}
        got, want = module.run(feeds), dict(zip(["y", "s", "z"], session.run(None, feeds)))
        for name in ("y", "s", "z"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
