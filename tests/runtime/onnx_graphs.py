"""Small ONNX models for the runtime tests, built with onnx.helper."""

from __future__ import annotations

from onnx import helper, numpy_helper


def model_bytes(nodes, inputs, outputs, inits=(), opset: int = 21) -> bytes:
    """A serialized model of one graph: ``inputs`` and ``outputs`` as (name, element type, shape)
    (shape None: unknown), ``inits`` as (name, array)."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m.SerializeToString()
