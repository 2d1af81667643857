"""MatMul of a stack whose rows are not C-contiguous (a Transpose's view) by a matrix
(runtime/kernels/linalg.py ``_rows``): one product of all the rows of a contiguous copy, the
product the prepared call makes of a contiguous stack, bit for bit; values against onnxruntime
and numpy in float64."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import linalg
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _method(data: bytes):
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


@pytest.mark.parametrize(
    "shape, perm",
    [
        ((2, 197, 64), [1, 0, 2]),  # ViT exported from torch at batch 2: [seq, batch, dim]
        ((3, 2, 5, 16), [0, 2, 1, 3]),  # heads moved after the sequence
        ((4, 1, 16), [1, 0, 2]),  # a batch-1 view that is contiguous already
    ],
    ids=["vit-batch-2", "4-d", "batch-1"],
)
def test_a_transposed_stack_times_a_matrix_is_one_product_with_the_prepared_calls_bits(shape, perm):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((shape[-1], 96)).astype(np.float32)
    transposed = model_bytes(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=perm),
            helper.make_node("MatMul", ["t", "w"], ["y"]),
        ],
        [("x", F32, list(shape))],
        [("y", F32, None)],
        [("w", w)],
        opset=19,
    )
    t_shape = [shape[p] for p in perm]
    direct = model_bytes(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])],
        [("x", F32, t_shape)],
        [("y", F32, None)],
        [("w", w)],
        opset=19,
    )
    method, by_prepared = _method(transposed), _method(direct)
    (step,) = [s for s in by_prepared._steps if s.info().name == "onnx::MatMul"]
    assert isinstance(step, _PreparedStep)
    session = ort.InferenceSession(transposed, providers=["CPUExecutionProvider"])
    for _ in range(2):
        x = np.abs(rng.standard_normal(shape)).astype(np.float32)  # the Relu keeps it as it is
        t = np.transpose(x, perm)
        rows = linalg._rows(t, w)  # the kernel's one product of all rows, even of a view
        assert rows is not None and rows.shape == (t.size // shape[-1], shape[-1])
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, offload.evaluate(offload.load(transposed), {"x": x})["y"])
        np.testing.assert_array_equal(got, by_prepared.run({"x": np.ascontiguousarray(t)})["y"])
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
        want = np.matmul(t.astype(np.float64), w.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
