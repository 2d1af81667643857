"""An Add of two tensors of one shape and the Relu, PRelu or LeakyRelu that alone reads its sum
as one prepared step of the CPU executor (runtime/fusions.py, ``_fuse_epilogues``;
runtime/kernels/add_prepared.py, one pass of ``add_loops``): against onnxruntime, bit for bit
against the two ops run apart (offload.evaluate) with signed zeros, NaN and infinities among the
sums, bound and unbound; and the pairs that must not be fused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import _util
from offload.runtime.kernels.add_prepared import _AddActivation
from offload.runtime.steps import _FusedAway, _PreparedStep

from .onnx_graphs import model_bytes

F32, F64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32
SHAPE = [1, 6, 9, 7]
SLOPES = {"channel": (6, 1, 1), "one": (1,), "row": (9, 1)}


def _model(op: str, slope=None, elem=F32, first: str = "Neg", b_shape=None, sum_read=False, slope_in=False):
    """a -> first -> Add(., b) -> op -> y; ``b_shape``: b's shape (broadcast where not a's);
    ``sum_read``: the sum is an output too; ``slope_in``: PRelu's slope an input of the graph."""
    dtype = np.float64 if elem == F64 else np.int32 if elem == I32 else np.float32
    inputs = [("a", elem, SHAPE), ("b", elem, b_shape or SHAPE)]
    inits = []
    if first == "Reshape":  # a kernel's result: the fused step runs unbound
        inits.append(("shape", np.array(SHAPE, np.int64)))
        nodes = [helper.make_node("Reshape", ["a", "shape"], ["r"])]
    else:
        nodes = [helper.make_node("Neg", ["a"], ["r"])]
    nodes.append(helper.make_node("Add", ["r", "b"], ["s"]))
    if op == "PRelu":
        values = np.linspace(-0.5, 2.0, int(np.prod(SLOPES[slope]))).reshape(SLOPES[slope]).astype(dtype)
        if slope_in:
            inputs.append(("slope", elem, list(SLOPES[slope])))
        else:
            inits.append(("slope", values))
        nodes.append(helper.make_node("PRelu", ["s", "slope"], ["y"]))
    elif op == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["s"], ["y"], alpha=0.3))
    else:
        nodes.append(helper.make_node(op, ["s"], ["y"]))
    outputs = [("y", elem, None)] + ([("s", elem, None)] if sum_read else [])
    return model_bytes(nodes, inputs, outputs, inits, opset=17)


def _feeds(dtype=np.float32, b_shape=None, first: str = "Neg") -> dict:
    rng = np.random.default_rng(3)
    a = rng.standard_normal(SHAPE).astype(dtype)
    b = rng.standard_normal(b_shape or SHAPE).astype(dtype)
    if (
        b.shape == a.shape and a.dtype.kind == "f"
    ):  # sums of -0, +0, NaN and both infinities (Neg flips a's values)
        sign = -1.0 if first == "Neg" else 1.0
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        flat_a[:6] = [sign * -0.0, sign * 0.0, sign * 1.5, np.nan, sign * -np.inf, sign * np.inf]
        flat_b[:6] = [-0.0, 0.0, -1.5, 1.0, 2.0, 2.0]
    return {"a": a, "b": b}


def _fused(method) -> list:
    return [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _AddActivation)]


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


CASES = [("Relu", None), ("PRelu", "channel"), ("PRelu", "one"), ("PRelu", "row"), ("LeakyRelu", None)]


@pytest.mark.parametrize("first", ["Neg", "Reshape"])
@pytest.mark.parametrize("op,slope", CASES, ids=[f"{o}-{s}" for o, s in CASES])
def test_fused_add_matches_onnxruntime_and_the_ops_apart(op, slope, first):
    if _util.compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    data = _model(op, slope, first=first)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    (step,) = _fused(method)
    assert step.call.op == op and step.kernel.second.op_name == f"onnx::{op}"
    assert sum(isinstance(s, _FusedAway) for s in method._steps) == 1
    feeds = _feeds(first=first)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    apart = offload.evaluate(program, feeds)["y"]
    for _ in range(2):  # the first run makes the bound calls; the second runs them again
        got = method.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(_bits(got), _bits(apart))
    # the sum -0: Relu gives +0 (numpy's maximum of -0 and 0), the others keep -0
    assert np.signbit(got.reshape(-1)[0]) == (op != "Relu")


def test_float64_is_fused_and_matches():
    if _util.compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    data = _model("PRelu", "channel", elem=F64)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    assert len(_fused(method)) == 1
    feeds = _feeds(np.float64)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = method.run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(_bits(got), _bits(offload.evaluate(program, feeds)["y"]))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(op="Relu", b_shape=[1, 6, 1, 1]),  # a broadcast Add: one ufunc pass stays
        dict(op="Relu", sum_read=True),  # the sum is read elsewhere: it must be written
        dict(op="PRelu", slope="channel", slope_in=True),  # a slope given at run time
        dict(op="Relu", elem=I32),  # not a float Add
    ],
    ids=["broadcast", "sum-read", "slope-input", "int32"],
)
def test_pairs_that_are_not_fused(kwargs):
    data = _model(**kwargs)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _fused(method)
    elem = kwargs.get("elem", F32)
    feeds = _feeds(np.int32 if elem == I32 else np.float32, kwargs.get("b_shape"))
    if kwargs.get("slope_in"):
        feeds["slope"] = np.linspace(-0.5, 2.0, 6).reshape(6, 1, 1).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = method.run(feeds)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-6)


def test_without_the_compiled_loops_nothing_is_fused(monkeypatch):
    monkeypatch.setattr(_util, "_LOOPS", False)
    data = _model("Relu")
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _fused(method)
    feeds = _feeds()
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(method.run(feeds)["y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loops_in_place_and_apart_give_numpys_bits(dtype):
    """The loops by blocks (out is an operand's memory) and element by element (it is not): rows
    longer than a block and not a multiple of it, against numpy's add, maximum and select."""
    loops = _util.compiled_loops()
    if loops is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    rng = np.random.default_rng(5)
    shape = (2, 3, 1300)
    a, b = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    a[0, 0, :6] = [-0.0, 0.0, 1.5, np.nan, -np.inf, np.inf]
    b[0, 0, :6] = [-0.0, -0.0, -1.5, 1.0, 2.0, 2.0]
    slope = np.array([0.25, -1.5, 3.0], dtype)
    total = a + b
    relu = np.maximum(total, np.zeros(shape, dtype))
    prelu = np.where(total < 0, total * slope.reshape(3, 1), total)
    x_prelu = np.where(a < 0, a * slope.reshape(3, 1), a)
    zero = dtype(0)
    for where in ("apart", "a", "b"):
        out = {"apart": np.empty(shape, dtype), "a": a.copy(), "b": b.copy()}[where]
        x, y = (out if where == "a" else a), (out if where == "b" else b)
        loops.add_relu(x, y, zero, out)
        np.testing.assert_array_equal(_bits(out), _bits(relu))
        out[...] = {"apart": 0, "a": a, "b": b}[where]
        loops.add_prelu(x, y, slope, out)
        np.testing.assert_array_equal(_bits(out), _bits(prelu))
    in_place = a.copy()
    loops.prelu(in_place, slope, in_place)
    apart = np.empty(shape, dtype)
    loops.prelu(a, slope, apart)
    np.testing.assert_array_equal(_bits(in_place), _bits(x_prelu))
    np.testing.assert_array_equal(_bits(apart), _bits(x_prelu))
