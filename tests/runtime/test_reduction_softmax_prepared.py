"""The prepared calls of ReduceSum / ReduceMean / ReduceMax / ReduceMin
(runtime/kernels/reduction_prepared.py) and of Softmax (runtime/kernels/softmax_prepared.py):
taken where their inputs are planned arrays, against float64 numpy and onnxruntime, and bit for
bit against offload.evaluate (the kernels); a transposed (strided) input too, for Softmax."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.reduction_prepared import _ReduceCall
from offload.runtime.kernels.softmax_prepared import _SoftmaxCall
from offload.runtime.steps import _PreparedStep
from tests.reference import onnxruntime_outputs

from .onnx_graphs import model_bytes

F32, F64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32
NP = {F32: np.float32, F64: np.float64, I32: np.int32}


def _method(data: bytes):
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


def _calls(method) -> list:
    """The calls of the method's prepared steps (bound into runs or not)."""
    return [s.call for s in method._steps if isinstance(s, _PreparedStep)]


def _exact(op: str, x: np.ndarray, axes: tuple, keepdims: int) -> np.ndarray:
    x = x.astype(np.float64)
    fn = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min}[op]
    return fn(x, axis=axes, keepdims=bool(keepdims))


# (input shape, axes, keepdims): a voice net's mean over its bins, a last axis, several axes
# with negative ones, a middle axis dropped
CASES = [([1, 129, 8], [1], 1), ([3, 7], [-1], 0), ([2, 3, 4, 5], [-1, 1], 1), ([4, 6, 5], [1], 0)]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape,axes,keepdims", CASES, ids=[f"{s}-{a}-{k}" for s, a, k in CASES])
def test_reduction(op, elem, shape, axes, keepdims):
    """Abs first, so that the reduction reads a planned array; the axes a constant of the file
    (axes a run computes leave the output's shape unknown at load: the kernel's). The call
    unbound (axes read at the call) computes what the bound one does."""
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node(op, ["a", "axes"], ["y"], keepdims=keepdims),
    ]
    data = model_bytes(
        nodes, [("x", elem, shape)], [("y", elem, None)], [("axes", np.array(axes, np.int64))], opset=18
    )
    method = _method(data)
    [call] = [c for c in _calls(method) if isinstance(c, _ReduceCall)]
    x = np.random.default_rng(len(shape) * 7 + shape[-1]).standard_normal(shape).astype(NP[elem])
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    (evaluated,) = offload.evaluate(offload.load(data), {"x": x}).values()
    exact = _exact(op, np.abs(x), tuple(axes), keepdims)
    tol = 2e-6 if elem == F32 else 1e-13
    for _ in range(2):  # the second run calls the bound calls
        got = method.run({"x": x})["y"]
        assert got.dtype == NP[elem] and got.shape == want.shape
        np.testing.assert_allclose(got, exact, rtol=tol, atol=0)
        np.testing.assert_allclose(got, want, rtol=2 * tol, atol=0)
        np.testing.assert_array_equal(got, evaluated)
    out = np.empty_like(got)
    call(out, np.abs(x), np.array(axes, np.int64))
    np.testing.assert_array_equal(out, evaluated)
    constant = np.array(axes, np.int64)
    constant.flags.writeable = False  # read once, then kept
    for _ in range(2):
        out[...] = 0
        call(out, np.abs(x), constant)
        np.testing.assert_array_equal(out, evaluated)


def test_integer_max_and_min():
    x = np.random.default_rng(3).integers(-50, 50, (4, 6), dtype=np.int32)
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("ReduceMax", ["a", "axes"], ["hi"], keepdims=0),
        helper.make_node("ReduceMin", ["a", "axes"], ["lo"], keepdims=1),
    ]
    data = model_bytes(
        nodes,
        [("x", I32, [4, 6])],
        [("hi", I32, None), ("lo", I32, None)],
        [("axes", np.array([1]))],
        opset=18,
    )
    method = _method(data)
    assert sum(isinstance(c, _ReduceCall) for c in _calls(method)) == 2
    got = method.run({"x": x})
    np.testing.assert_array_equal(got["hi"], np.abs(x).max(axis=1))
    np.testing.assert_array_equal(got["lo"], np.abs(x).min(axis=1, keepdims=True))


def _exact_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [([1, 8, 32, 32], -1), ([2, 5, 7], 1), ([6, 3], 0), ([1, 1000], 1)])
def test_softmax(elem, shape, axis):
    """Softmax of a planned array (an attention map's rows, a middle axis, the first axis, a
    classifier's logits), scaled by 8 (exp's relative error grows with its argument: the exact
    softmax is taken of the float32 products both runtimes read)."""
    data = model_bytes(
        [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Softmax", ["a"], ["y"], axis=axis)],
        [("x", elem, shape)],
        [("y", elem, None)],
        [("k", np.array(8.0, NP[elem]))],
    )
    method = _method(data)
    assert sum(isinstance(c, _SoftmaxCall) for c in _calls(method)) == 1
    x = np.random.default_rng(shape[-1]).standard_normal(shape).astype(NP[elem])
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    (evaluated,) = offload.evaluate(offload.load(data), {"x": x}).values()
    exact = _exact_softmax(x * NP[elem](8), axis)
    tol = 1e-5 if elem == F32 else 1e-12
    for _ in range(2):
        got = method.run({"x": x})["y"]
        assert got.dtype == NP[elem]
        np.testing.assert_allclose(got, exact, rtol=tol, atol=tol * 1e-3)
        np.testing.assert_allclose(got, want, rtol=2 * tol, atol=tol * 1e-3)
        np.testing.assert_array_equal(got, evaluated)


@pytest.mark.parametrize(
    "shape, perm, axis",
    [
        ((2, 16, 8), [0, 2, 1], -1),  # summed along the view's strided axis
        ((1, 8, 32, 32), [0, 1, 3, 2], -1),  # an exported attention map's scores, transposed
        ((1, 32, 8, 1, 16), [0, 2, 3, 4, 1], 1),  # an axis of size 1 moved, a middle axis
        ((3, 4, 5), [2, 0, 1], 0),
    ],
)
def test_softmax_of_a_transposed_input(shape, perm, axis):
    """A float Transpose's result is the kernel's strided view: the prepared call takes it as it
    is, and sums in the view's layout as the kernel does, so the result is bit for bit what
    evaluate computes (the kernel), near onnxruntime's and float64 numpy's."""
    data = model_bytes(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=perm),
            helper.make_node("Softmax", ["t"], ["y"], axis=axis),
        ],
        [("x", F32, list(shape))],
        [("y", F32, None)],
    )
    method = _method(data)
    [step] = [s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _SoftmaxCall)]
    taken = []
    step.kernel.fn = lambda *a, **k: taken.append(a)  # the kernel's way would record its call
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    (evaluated,) = offload.evaluate(offload.load(data), {"x": x}).values()
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    for _ in range(2):
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, evaluated)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8)
        np.testing.assert_allclose(got, _exact_softmax(x.transpose(perm), axis), rtol=1e-5, atol=1e-8)
    assert not taken
