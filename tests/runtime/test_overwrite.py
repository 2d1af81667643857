"""Outputs written over their inputs: the memory plan gives an elementwise op's output the place
of an input of the same type that it reads for the last time (emit/plan.py ``WRITES_OVER``);
each op so listed must then still compute what onnxruntime computes, on every path a run takes
(bound calls, prepared calls, kernels)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.emit.plan import WRITES_OVER
from offload.profile import Profile

F32 = TensorProto.FLOAT
SHAPE = [2, 6, 20, 40]  # 38 KB: at least emit.plan.MIN_OVERWRITE_BYTES


def _full(lo: float, hi: float) -> np.ndarray:
    return np.linspace(lo, hi, int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)


# op → (extra inputs as constants, attributes[, input shape, output shape]); the written-over
# input is "a" at each position.
CASES = {
    "Relu": ([], {}),
    "LeakyRelu": ([], {"alpha": 0.1}),
    "Sigmoid": ([], {}),
    "Tanh": ([], {}),
    "Exp": ([], {}),
    "Neg": ([], {}),
    "Abs": ([], {}),
    "Sqrt": ([], {}),
    "Clip": ([("lo", np.float32(-0.5)), ("hi", np.float32(0.75))], {}),
    "Add": ([("c", _full(-1, 1))], {}),
    "Sub": ([("c", _full(-1, 1))], {}),
    "Mul": ([("c", _full(-1, 1))], {}),
    "Div": ([("c", _full(0.5, 2))], {}),
    "Sum": ([("c", _full(-1, 1)), ("d", _full(2, 3))], {}),
    "Max": ([("c", _full(-1, 1))], {}),
    "Min": ([("c", _full(-1, 1))], {}),
    "BatchNormalization": (
        [
            ("scale", np.linspace(0.5, 1.5, 6, dtype=np.float32)),
            ("bias", np.linspace(-1, 1, 6, dtype=np.float32)),
            ("mean", np.linspace(-0.2, 0.3, 6, dtype=np.float32)),
            ("var", np.linspace(0.5, 2, 6, dtype=np.float32)),
        ],
        {"epsilon": 1e-5},
    ),
    "LRN": ([], {"size": 3, "alpha": 1e-2, "beta": 0.75, "bias": 1.0}),
    "Reshape": ([("shape", np.array([2, 6, 800], np.int64))], {}, SHAPE, [2, 6, 800]),
    "Flatten": ([], {"axis": 2}, SHAPE, [12, 800]),
    "Squeeze": ([("axes", np.array([2], np.int64))], {}, [2, 6, 1, 400], [2, 6, 400]),
    "Unsqueeze": ([("axes", np.array([0], np.int64))], {}, SHAPE, [1, *SHAPE]),
    "Identity": ([], {}),
}


def _cases():
    for op, positions in sorted(WRITES_OVER.items()):
        name = op.split("::")[1]
        for k in positions:
            yield pytest.param(name, k, id=f"{name}-{k}")


def _model(op: str, position: int) -> bytes:
    extra, attrs, *shapes = CASES[op]
    shape_in, shape_out = shapes or (SHAPE, SHAPE)
    names = [n for n, _ in extra]
    operands = names[:position] + ["a"] + names[position:]
    # "a" is planned (the result of an op) and read for the last time by ``op``.
    first = helper.make_node("Mul" if op == "Sqrt" else "Add", ["x", "x"], ["a"])
    graph = helper.make_graph(
        [first, helper.make_node(op, operands, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", F32, shape_in)],
        [helper.make_tensor_value_info("y", F32, shape_out)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in extra],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def test_a_small_output_keeps_its_own_place():
    # Under MIN_OVERWRITE_BYTES the overlap check numpy makes per call costs more than it saves.
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F32, [16])],
        [helper.make_tensor_value_info("y", F32, [16])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    method = offload.runtime.load(offload.save(offload.load(m.SerializeToString()))).method("forward")
    relu = [s for s in method.instructions if s.name == "onnx::Relu"][-1]
    assert not np.shares_memory(method.planned[relu.reads[0]], method.planned[relu.writes[0]])


def test_every_listed_op_has_a_case():
    assert {op.split("::")[1] for op in WRITES_OVER} == set(CASES)


@pytest.mark.parametrize("op,position", list(_cases()))
def test_output_written_over_its_input_matches_onnxruntime(op, position):
    data = _model(op, position)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    planned = method.planned
    kernel = [s for s in method.instructions if s.name == f"onnx::{op}"][-1]
    (a,), (y,) = kernel.reads[position : position + 1], kernel.writes
    assert np.shares_memory(planned[a], planned[y]), "the plan gave the output its own place"

    shape_in = (CASES[op][2:] or (SHAPE,))[0]
    x = np.random.default_rng(position).standard_normal(shape_in).astype(np.float32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):  # the first run binds the calls; the second runs them bound
        np.testing.assert_allclose(method.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(method.run({"x": x}, profile=Profile())["y"], want, rtol=1e-5, atol=1e-6)


# Pools whose smaller output may start where their input did (emit/plan.py SHRINKS_OVER):
# (op, input shape, attributes, dtype); outputs of at least MIN_OVERWRITE_BYTES. 4-D float pools run as prepared calls (the padding
# buffer or not), others by the kernel's folds.
POOLS = {
    "max-3x3-s2": ("MaxPool", [1, 24, 33, 33], {"kernel_shape": [3, 3], "strides": [2, 2]}, F32),
    "max-2x2-s2-padded": (
        "MaxPool",
        [2, 8, 30, 31],
        {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]},
        F32,
    ),
    "max-stem": (
        "MaxPool",
        [1, 24, 32, 32],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        F32,
    ),
    "average-stem": (
        "AveragePool",
        [2, 12, 32, 32],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        F32,
    ),
    "max-ceil": (
        "MaxPool",
        [1, 24, 35, 35],
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        F32,
    ),
    "max-1d": ("MaxPool", [2, 16, 600], {"kernel_shape": [3], "strides": [2]}, F32),
    "max-int8": ("MaxPool", [1, 64, 48, 48], {"kernel_shape": [3, 3], "strides": [2, 2]}, TensorProto.INT8),
    "average-3x3-s2": ("AveragePool", [1, 24, 33, 33], {"kernel_shape": [3, 3], "strides": [2, 2]}, F32),
    "average-padded": (
        "AveragePool",
        [1, 24, 32, 32],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        F32,
    ),
    "average-1d": ("AveragePool", [2, 16, 600], {"kernel_shape": [4], "strides": [3]}, F32),
}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_pool_output_written_over_its_input_matches_onnxruntime(case):
    op, shape, attrs, dtype = POOLS[case]
    # "a" (planned, read for the last time by the pool) is Abs(x): of the pool's input type.
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node(op, ["a"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info("y", dtype, None)],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    data = m.SerializeToString()
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    pool = [s for s in method.instructions if s.name == f"onnx::{op}"][-1]
    a, y = method.planned[pool.reads[0]], method.planned[pool.writes[0]]
    assert a.ctypes.data == y.ctypes.data and y.nbytes < a.nbytes, "the pool's output got its own place"

    rng = np.random.default_rng(len(case))
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    if np_dtype.kind == "f":
        x = rng.standard_normal(shape).astype(np_dtype)
    else:
        x = rng.integers(-127, 128, shape).astype(np_dtype)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):  # the first run binds the calls; the second runs them bound
        np.testing.assert_allclose(method.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(method.run({"x": x}, profile=Profile())["y"], want, rtol=1e-6, atol=1e-6)


def test_a_pool_with_indices_keeps_its_own_place():
    # MaxPool's Indices are computed from the input after the values are written.
    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["x"], ["a"]),
            helper.make_node("MaxPool", ["a"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F32, [1, 8, 32, 32])],
        [
            helper.make_tensor_value_info("y", F32, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    data = m.SerializeToString()
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    pool = [s for s in method.instructions if s.name == "onnx::MaxPool"][-1]
    assert not np.shares_memory(method.planned[pool.reads[0]], method.planned[pool.writes[0]])
    x = np.random.default_rng(1).standard_normal((1, 8, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = method.run({"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["i"], want[1])
