"""Prepared calls (kernels.prepared): a .pte method runs elementwise ops straight into their arena
views, with the same bits as the kernels (offload.evaluate), and takes the kernel's way for an
input that is not a C-contiguous array of the declared type."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.module import _KernelStep, _PreparedStep

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return offload.load(m.SerializeToString())


def _method(program):
    return offload.runtime.load(offload.save(program)).method("forward")


def _kinds(method) -> dict[str, str]:
    out = {}
    for step in method._steps:
        if isinstance(step, _PreparedStep):
            out[step.kernel.op_name] = "prepared"
        elif isinstance(step, _KernelStep):
            out.setdefault(step.op_name, "kernel")
    return out


def test_elementwise_chain_is_prepared_and_bit_equal():
    rng = np.random.default_rng(0)
    program = _model(
        [
            helper.make_node("Add", ["x", "c"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["s"]),
            helper.make_node("Mul", ["s", "x"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Tanh", ["r"], ["t"]),
            helper.make_node("Max", ["t", "x"], ["mx"]),
            helper.make_node("Clip", ["mx", "lo", "hi"], ["cl"]),
            helper.make_node("Less", ["cl", "c"], ["lt"]),
            helper.make_node("Where", ["lt", "cl", "x"], ["y"]),
        ],
        [("x", F32, [3, 64])],
        [("y", F32, [3, 64])],
        [
            ("c", rng.standard_normal(64).astype(np.float32)),
            ("lo", np.array(-0.5, np.float32)),
            ("hi", np.array(0.75, np.float32)),
        ],
    )
    method = _method(program)
    kinds = _kinds(method)
    for op in ("Add", "Sigmoid", "Mul", "Relu", "Tanh", "Max", "Clip", "Where"):
        assert kinds[f"onnx::{op}"] == "prepared", op
    for scale in (1.0, 30.0, 200.0):  # Sigmoid far out on both sides
        x = (rng.standard_normal((3, 64)) * scale).astype(np.float32)
        np.testing.assert_array_equal(method.run({"x": x})["y"], offload.evaluate(program, {"x": x})["y"])


def test_a_non_contiguous_input_takes_the_kernel():
    """Transpose's result is a view the method does not copy into its arena: Add gets a
    non-C-contiguous array and runs its kernel, with the same result."""
    program = _model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
            helper.make_node("Add", ["t", "t"], ["y"]),
        ],
        [("x", F32, [4, 6])],
        [("y", F32, [6, 4])],
    )
    method = _method(program)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(method.run({"x": x})["y"], x.T * 2)


@pytest.mark.parametrize(
    "dtype, onnx_type", [(np.float16, TensorProto.FLOAT16), (np.int64, TensorProto.INT64)]
)
def test_other_types(dtype, onnx_type):
    """float16 (computed widened) is not prepared; integers are, with the kernel's bits."""
    program = _model(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["a", "x"], ["y"])],
        [("x", onnx_type, [5])],
        [("y", onnx_type, [5])],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Add"] == ("kernel" if dtype == np.float16 else "prepared")
    x = np.arange(5).astype(dtype)
    np.testing.assert_array_equal(method.run({"x": x})["y"], offload.evaluate(program, {"x": x})["y"])
