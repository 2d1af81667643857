"""1-D Conv on the CPU: the prepared call (``conv._Conv1dCall``, the 2-D recipe at height 1) and
the kernel compute the same bits, and both match onnxruntime."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.conv import _Conv1dCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _model(length, attrs: dict, c=4, m=8, k=3, bias=True) -> bytes:
    rng = np.random.default_rng(5)
    group = attrs.get("group", 1)
    inits = [("w", rng.standard_normal((m, c // group, k)).astype(np.float32))]
    if bias:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
    node = helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["y"], **attrs)
    return model_bytes([node], [("x", F32, [2, c, length])], [("y", F32, None)], inits)


CASES = [
    {},
    {"pads": [2, 1], "strides": [2]},
    {"dilations": [3], "pads": [1, 1]},
    {"group": 2, "strides": [3]},
    {"group": 4, "pads": [1, 1]},  # depthwise
    {"auto_pad": "SAME_UPPER", "strides": [2]},
]


@pytest.mark.parametrize("attrs", CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()) or "plain")
@pytest.mark.parametrize("bias", [True, False])
def test_prepared_and_kernel_give_the_same_bits_as_onnxruntime_gives_values(attrs, bias):
    static = _model(37, attrs, bias=bias)
    symbolic = _model("l", attrs, bias=bias)
    x = np.random.default_rng(6).standard_normal((2, 4, 37)).astype(np.float32)
    want = ort.InferenceSession(static, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    module = offload.runtime.load(offload.save(offload.load(static)))
    steps = module.method("forward")._steps
    assert any(isinstance(s, _PreparedStep) and isinstance(s.call, _Conv1dCall) for s in steps)
    for _ in range(2):  # the second run takes the bound calls
        prepared = module.run({"x": x})["y"]
    kernel = offload.evaluate(offload.load(symbolic), {"x": x})["y"]
    np.testing.assert_allclose(prepared, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(prepared, kernel)
