"""Values computed once: a kernel whose inputs are all constants (the light models make their
fully connected weights with ConstantOfShape) runs at a method's first run, not at every run,
and its result takes no place in the arena (emit/plan.py, runtime/load_time.py _find_load_time)."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
from offload.runtime import kernels
from offload.runtime.steps import _LoadTimeStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _weights_model() -> bytes:
    """y = x @ (ConstantOfShape([64, 32], 0.25) + b): the weight is made from constants only."""
    return model_bytes(
        [
            helper.make_node(
                "ConstantOfShape",
                ["shape"],
                ["w0"],
                value=helper.make_tensor("v", F32, [1], [0.25]),
            ),
            helper.make_node("Add", ["w0", "b"], ["w"]),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        [("x", F32, [8, 64])],
        [("y", F32, [8, 32])],
        [
            ("shape", np.array([64, 32], np.int64)),
            ("b", np.linspace(-1, 1, 32).astype(np.float32)),
        ],
    )


def _method(data: bytes):
    # passes="none" keeps the ops as the file has them (const_elimination would fold these small ones)
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


def test_constant_made_weights_are_computed_once_and_take_no_arena(monkeypatch):
    data = _weights_model()
    calls = []
    real = kernels.find("", "ConstantOfShape")

    def counting(ctx, *args, **attrs):
        calls.append(1)
        return real(ctx, *args, **attrs)

    monkeypatch.setitem(kernels.KERNELS, ("", "ConstantOfShape"), counting)
    method = _method(data)
    assert [s.kernel.op_name for s in method._steps if isinstance(s, _LoadTimeStep)] == [
        "onnx::ConstantOfShape",
        "onnx::Add",
    ]
    assert method.planned_bytes == 8 * 32 * 4  # only y: neither w0 nor w has an arena place
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((8, 64)).astype(np.float32)
        np.testing.assert_allclose(
            method.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5
        )
    assert len(calls) == 1
    kept = [
        method._initial[s]
        for step in method._steps
        if isinstance(step, _LoadTimeStep)
        for s in step.kernel.out_slots
    ]
    assert all(not a.flags.writeable for a in kept)


def test_concurrent_first_runs_compute_once(monkeypatch):
    data = _weights_model()
    calls = []
    real = kernels.find("", "ConstantOfShape")
    gate = threading.Barrier(4)

    def counting(ctx, *args, **attrs):
        calls.append(1)
        return real(ctx, *args, **attrs)

    monkeypatch.setitem(kernels.KERNELS, ("", "ConstantOfShape"), counting)
    method = _method(data)
    x = np.ones((8, 64), np.float32)
    results = []

    def run():
        gate.wait()
        results.append(method.run({"x": x})["y"])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    for r in results:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0][0], 64 * (0.25 + np.linspace(-1, 1, 32)), rtol=1e-5)


def test_random_ops_still_draw_at_every_run():
    """RandomUniformLike of a constant (no seed) is not computed once: each run draws anew."""
    data = model_bytes(
        [
            helper.make_node("RandomUniformLike", ["c"], ["r"]),
            helper.make_node("Add", ["x", "r"], ["y"]),
        ],
        [("x", F32, [256])],
        [("y", F32, [256])],
        [("c", np.zeros(256, np.float32))],
    )
    method = _method(data)
    assert not any(isinstance(s, _LoadTimeStep) for s in method._steps)
    x = np.zeros(256, np.float32)
    a, b = method.run({"x": x})["y"], method.run({"x": x})["y"]
    assert not np.array_equal(a, b)
    assert ((a >= 0) & (a < 1)).all()
