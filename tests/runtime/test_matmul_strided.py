"""MatMul's prepared call on a strided left operand (a Transpose's result is a view): the
kernel's own numpy call for that layout, so the same bits as offload.evaluate, against
onnxruntime, with no step taking the kernel's way."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.linalg import _MatMulCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


@pytest.mark.parametrize(
    "shape, perm",
    [((1, 1, 257, 5), [0, 1, 3, 2]), ((2, 3, 7, 4), [0, 1, 3, 2]), ((7, 5), [1, 0]), ((3, 7, 4), [1, 2, 0])],
    ids=["spectrogram-frames", "stack", "matrix", "moved-stack"],
)
def test_matmul_of_a_transposed_view_is_prepared(shape, perm, monkeypatch):
    k = shape[perm[-1]]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=perm),
        helper.make_node("MatMul", ["t", "w"], ["y"]),
    ]
    w = np.random.default_rng(41).standard_normal((k, 6)).astype(np.float32)
    data = model_bytes(nodes, [("x", F32, list(shape))], [("y", F32, None)], [("w", w)])
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    (step,) = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::MatMul"]
    assert type(step) is _PreparedStep and type(step.call) is _MatMulCall

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(_PreparedStep, "_by_kernel", refuse)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(42)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])


@pytest.mark.parametrize("stack", [(), (2,)], ids=["matrix", "stack"])
def test_a_product_of_one_row_does_not_depend_on_the_layout_of_its_operand(stack):
    """One row by Transpose(x): numpy hands it to BLAS's gemv, whose sums follow the operands'
    memory layout, so the product reads C-contiguous operands and gives the bits of the product
    by a contiguous copy of the transposed values, in offload.evaluate and in the .pte's runs
    alike (a decoder Loop's bound steps hold such a value as a view where evaluate holds a copy)."""
    rng = np.random.default_rng(11)
    h = rng.standard_normal((*stack, 1, 256)).astype(np.float32)
    x = rng.standard_normal((*stack, 96, 256)).astype(np.float32)
    perm = [*range(len(stack)), len(stack) + 1, len(stack)]
    viewed = model_bytes(
        [helper.make_node("Transpose", ["x"], ["t"], perm=perm), helper.make_node("MatMul", ["h", "t"], ["y"])],
        [("h", F32, list(h.shape)), ("x", F32, list(x.shape))],
        [("y", F32, None)],
    )
    copied = model_bytes(
        [helper.make_node("MatMul", ["h", "t"], ["y"])],
        [("h", F32, list(h.shape)), ("t", F32, [*stack, 256, 96])],
        [("y", F32, None)],
    )
    want = offload.evaluate(offload.load(copied), {"h": h, "t": np.ascontiguousarray(x.transpose(perm))})["y"]
    program = offload.load(viewed)
    np.testing.assert_array_equal(offload.evaluate(program, {"h": h, "x": x})["y"], want)
    module = offload.runtime.load(offload.save(program))
    (reference,) = ort.InferenceSession(viewed, providers=["CPUExecutionProvider"]).run(None, {"h": h, "x": x})
    for _ in range(3):  # unbound, then bound
        got = module.run({"h": h, "x": x})["y"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)
