"""Transpose as a prepared call (runtime/kernels/tensor.py ``_transpose_call``) where it moves
axes of size 1 alone, and a kernel step elsewhere: values against numpy, and a .pte run bit for
bit what ``offload.evaluate`` gives (a MatMul reads the result)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.steps import _KernelStep, _PreparedStep
from offload.runtime.transpose_views import _CopyTransposed, _CopyUntransposed

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _transpose_steps(method) -> list:
    steps = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::Transpose"]
    assert len(steps) == 1
    return steps


@pytest.mark.parametrize(
    "shape, perm, prepared",
    [
        ((1, 5, 3), [1, 0, 2], True),  # the exported nets' [batch 1, seq, n] → [seq, 1, n]
        ((5, 2, 1, 4), [0, 2, 1, 3], True),  # an LSTM's Y [seq, dirs, 1, hidden] → [seq, 1, dirs, hidden]
        ((1, 4, 1), None, True),  # perm omitted: all axes reversed
        ((2, 5, 3), [1, 0, 2], False),  # batch 2: a real transpose stays a view (the kernel's)
        ((5, 3), [1, 0], False),
    ],
)
def test_transpose_moving_axes_of_size_1_is_prepared(shape, perm, prepared):
    out_shape = np.transpose(np.zeros(shape), perm).shape
    w = np.random.default_rng(1).standard_normal((out_shape[-1], 6)).astype(np.float32)
    attrs = {} if perm is None else {"perm": perm}
    data = model_bytes(
        [helper.make_node("Transpose", ["x"], ["t"], **attrs), helper.make_node("MatMul", ["t", "w"], ["y"])],
        [("x", F32, list(shape))],
        [("y", F32, None), ("t", F32, None)],
        [("w", w)],
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = _transpose_steps(method)
    assert type(step) is (_PreparedStep if prepared else _KernelStep)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    want = offload.evaluate(offload.load(data), {"x": x})
    for _ in range(2):
        got = method.run({"x": x})
        np.testing.assert_array_equal(got["t"], np.transpose(x, perm))
        np.testing.assert_array_equal(got["y"], want["y"])


def test_exported_lstm_net_transposes_prepared_at_batch_1():
    # In the shape specialization for batch 1 each of the four Transposes of tests/models/lstm_model.onnx
    # moves an axis of size 1 alone: a reshape; at batch 2 each is a real transpose, prepared only
    # as a copy whose readers see the kernel's arrays (runtime/transpose_views.py): the same bits.
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models", "lstm_model.onnx")
    program = offload.optimize(offload.load(path))
    method = offload.runtime.load(offload.save(program)).method("forward")
    rng = np.random.default_rng(0)
    for batch, want in ((1, 4), (2, 0)):
        feeds = {"tokens": rng.integers(0, 100, (batch, 9)).astype(np.int64)}
        for _ in range(3):
            got = method.run(feeds)
        plan = method._specializations.entries[((batch, 9),)]
        prepared = [
            s for s in plan.steps if type(s) is _PreparedStep and s.kernel.op_name == "onnx::Transpose"
        ]
        moves = [s for s in prepared if type(s.call).__name__ == "_ReshapeCall"]
        assert len(moves) == want, [type(s).__name__ for s in plan.steps]
        assert all(type(s.call) in (_CopyTransposed, _CopyUntransposed) for s in prepared if s not in moves)
        for name, value in offload.evaluate(program, feeds).items():
            np.testing.assert_array_equal(got[name], value)
