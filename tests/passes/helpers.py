"""Building small ONNX models, and checking a pass against onnxruntime on the original model."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload

F32 = TensorProto.FLOAT
OPSET = 21


def model(nodes, inputs, outputs, initializers=None, opset: int = OPSET) -> bytes:
    """An ONNX model: ``nodes`` from helper.make_node, ``inputs`` / ``outputs`` as
    {name: (elem type, shape)} (an output's shape may be None), ``initializers`` {name: array}."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()


def node(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, **attrs)


def onnxruntime_run(data: bytes, feeds: dict) -> dict:
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def op_types(program) -> Counter:
    return Counter(op.op_type for op in program.main.body.walk())


def optimized(data: bytes, passes) -> tuple:
    """(original program, optimized program); the optimized one is verified after every pass."""
    program = offload.load(data)
    return program, offload.optimize(program, passes, verify_each=True)


def check(data: bytes, passes, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6):
    """Optimize with ``passes``; the result must match onnxruntime on the original model.
    Returns the optimized program, for the caller to check its ops."""
    _, program = optimized(data, passes)
    expected = onnxruntime_run(data, feeds)
    got = offload.evaluate(program, feeds)
    assert set(got) == set(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)
        assert np.asarray(got[name]).dtype == want.dtype, name
    return program


def rand(*shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
