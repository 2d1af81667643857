"""Gemm's prepared call: transposed operands, alpha, beta with a constant C (scaled once) and
with a C a run computes; against onnxruntime and bit for bit against offload.evaluate."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.linalg import _GemmCall
from offload.runtime.steps import _PreparedStep

F32 = TensorProto.FLOAT


def _model(trans_a: int, trans_b: int, alpha: float, beta: float) -> bytes:
    """y1 = Gemm(a + 0, w, c) with constant w and c; y2 = Gemm(a, w, a run's bias d + 1)."""
    rng = np.random.default_rng(trans_a * 2 + trans_b)
    a_shape = [7, 5] if trans_a else [5, 7]
    w_shape = [6, 7] if trans_b else [7, 6]
    inits = {
        "w": rng.standard_normal(w_shape).astype(np.float32),
        "c": rng.standard_normal([6]).astype(np.float32),
        "one": np.ones((), np.float32),
    }
    attrs = dict(transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    nodes = [
        helper.make_node("Add", ["d", "one"], ["d1"]),
        helper.make_node("Gemm", ["a", "w", "c"], ["y1"], **attrs),
        helper.make_node("Gemm", ["a", "w", "d1"], ["y2"], **attrs),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", F32, a_shape), helper.make_tensor_value_info("d", F32, [5, 6])],
        [helper.make_tensor_value_info("y1", F32, [5, 6]), helper.make_tensor_value_info("y2", F32, [5, 6])],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    "trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 1.0), (0, 1, 1.0, 0.25), (1, 1, -2.0, 3.0)]
)
def test_gemm_matches_onnxruntime_and_evaluate(trans_a, trans_b, alpha, beta):
    data = _model(trans_a, trans_b, alpha, beta)
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    steps = module.method("forward")._steps
    assert sum(isinstance(s, _PreparedStep) and isinstance(s.call, _GemmCall) for s in steps) == 2
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(3):
        feeds = {
            "a": rng.standard_normal([7, 5] if trans_a else [5, 7]).astype(np.float32),
            "d": rng.standard_normal([5, 6]).astype(np.float32),
        }
        got, ref = module.run(feeds), offload.evaluate(program, feeds)
        for name, want in zip(("y1", "y2"), session.run(None, feeds)):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
