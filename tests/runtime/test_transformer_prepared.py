"""The prepared calls of a transformer encoder's steps: MatMul of two stacks of matrices
(runtime/kernels/matmul_stacks.py), Gelu (gelu_prepared.py) and LayerNormalization
(layer_norm_prepared.py). Each is taken where its types are known at load, computes within
float32's rounding of onnxruntime and of float64 numpy, and gives the kernel's bits
(offload.evaluate) both bound into a run and called on its own."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.gelu_prepared import _ExactCall, _TanhCall
from offload.runtime.kernels.layer_norm_prepared import _LayerNormCall
from offload.runtime.kernels.matmul_stacks import _StackedMatMulCall
from offload.runtime.steps import _PreparedStep
from tests.reference import onnxruntime_outputs

from .onnx_graphs import model_bytes

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
NP = {F32: np.float32, F64: np.float64}
TOL = {F32: 2e-5, F64: 1e-12}


def _calls(method, kind) -> list:
    return [s.call for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, kind)]


def _runs(data: bytes, feeds: dict, kind):
    """The method's result on two runs (the second calls its bound calls), each equal to
    offload.evaluate's bit for bit; the one prepared call of ``kind`` it takes."""
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    [call] = _calls(method, kind)
    (evaluated,) = offload.evaluate(offload.load(data), feeds).values()
    for _ in range(2):
        got = method.run(feeds)["y"]
        assert got.dtype == evaluated.dtype and got.shape == evaluated.shape
        np.testing.assert_array_equal(got, evaluated)
    return got, call, evaluated


def _rand(shape, elem, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(NP[elem])


# (left shape, right shape, transpose the left's middle axes first): attention's Q·Kᵀ and
# weights·V per head, broadcast batches, a matrix by a stack, a stack of rank 3, a Transpose's
# strided view of the left
MATMULS = [
    ((1, 6, 40, 16), (1, 6, 16, 40), False),
    ((1, 6, 40, 40), (1, 6, 40, 16), False),
    ((2, 1, 5, 7), (3, 7, 4), False),
    ((5, 7), (2, 7, 4), False),
    ((3, 5, 7), (3, 7, 4), False),
    ((1, 9, 4, 8), (1, 4, 8, 9), True),
]


@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("a_shape,b_shape,transposed", MATMULS, ids=[f"{a}x{b}" for a, b, _ in MATMULS])
def test_stacked_matmul(elem, a_shape, b_shape, transposed):
    nodes = [helper.make_node("Abs", ["a"], ["p"]), helper.make_node("Neg", ["b"], ["q"])]
    if transposed:
        nodes.append(helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("MatMul", ["t" if transposed else "p", "q"], ["y"]))
    data = model_bytes(nodes, [("a", elem, a_shape), ("b", elem, b_shape)], [("y", elem, None)])
    feeds = {"a": _rand(a_shape, elem, 1), "b": _rand(b_shape, elem, 2)}
    got, call, evaluated = _runs(data, feeds, _StackedMatMulCall)
    (want,) = onnxruntime_outputs(data, feeds).values()
    left = np.abs(feeds["a"].astype(np.float64))
    exact = np.matmul(left.transpose(0, 2, 1, 3) if transposed else left, -feeds["b"].astype(np.float64))
    scale = np.abs(left).max() * np.abs(feeds["b"]).max() * a_shape[-1]
    np.testing.assert_allclose(got, exact, rtol=0, atol=TOL[elem] * scale)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[elem] * scale)
    a, b = np.abs(feeds["a"]), -feeds["b"]
    out = np.empty_like(got)
    call(out, a.transpose(0, 2, 1, 3) if transposed else a, b)
    np.testing.assert_array_equal(out, evaluated)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 1, 8), (2, 8, 5)), ((2, 4, 8), (2, 8, 1))])
def test_stacked_matmul_leaves_vector_products_to_the_kernel(a_shape, b_shape):
    """A product with one row or one column is numpy's gemv, whose sums depend on the
    operands' layout: the kernel's."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    data = model_bytes(nodes, [("a", F32, a_shape), ("b", F32, b_shape)], [("y", F32, None)])
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _calls(method, _StackedMatMulCall)


def _gelu64(x: np.ndarray, approximate: str) -> np.ndarray:
    x = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(elem, approximate):
    shape = (2, 30, 24)
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Gelu", ["n"], ["y"], approximate=approximate)]
    data = model_bytes(nodes, [("x", elem, shape)], [("y", elem, None)], opset=20)
    x = _rand(shape, elem, 3) * 3
    got, call, evaluated = _runs(data, {"x": x}, _TanhCall if approximate == "tanh" else _ExactCall)
    np.testing.assert_allclose(got, _gelu64(-x, approximate), rtol=TOL[elem], atol=TOL[elem])
    if elem == F32 or approximate == "tanh":  # onnxruntime has no float64 Erf
        (want,) = onnxruntime_outputs(data, {"x": x}).values()
        # its float64 Gelu is within 6e-7 of float64 numpy's: compared at float32's tolerance
        np.testing.assert_allclose(got, want, rtol=TOL[F32], atol=TOL[F32])
    out = np.empty_like(got)
    call(out, -x)
    np.testing.assert_array_equal(out, evaluated)


def _layer_norm64(x, scale, bias, axis):
    x = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    c = x - x.mean(axis=axes, keepdims=True)
    y = c / np.sqrt((c * c).mean(axis=axes, keepdims=True) + 1e-5) * scale
    return y if bias is None else y + bias


# (X shape, axis, scale/bias shape, with a bias): an encoder's last axis, more rows, two
# trailing axes, a scale broadcast over the first of them, from the second axis on
LAYER_NORMS = [
    ((1, 40, 24), -1, (24,), True),
    ((1, 900, 24), -1, (24,), False),
    ((2, 3, 4, 5), -2, (4, 5), True),
    ((2, 3, 4, 5), 2, (1, 5), False),
    ((2, 6, 7), 1, (6, 7), True),
]


@pytest.mark.parametrize("elem", [F32, F64], ids=["float32", "float64"])
@pytest.mark.parametrize("shape,axis,param,biased", LAYER_NORMS, ids=[f"{s}-{a}-{b}" for s, a, _, b in LAYER_NORMS])
def test_layer_normalization(elem, shape, axis, param, biased):
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node(
            "LayerNormalization", ["a", "scale"] + (["bias"] if biased else []), ["y"], axis=axis, stash_type=elem
        ),
    ]
    scale = _rand(param, elem, 4)
    inits = [("scale", scale)] + ([("bias", _rand(param, elem, 5))] if biased else [])
    data = model_bytes(nodes, [("x", elem, shape)], [("y", elem, None)], inits, opset=17)
    x = _rand(shape, elem, 6) * 2 + 1
    got, call, evaluated = _runs(data, {"x": x}, _LayerNormCall)
    (want,) = onnxruntime_outputs(data, {"x": x}).values()
    bias = inits[1][1] if biased else None
    exact = _layer_norm64(np.abs(x), scale, bias, axis)
    np.testing.assert_allclose(got, exact, rtol=0, atol=10 * TOL[elem])
    np.testing.assert_allclose(got, want, rtol=0, atol=10 * TOL[elem])
    out = np.empty_like(got)
    call(out, np.abs(x), *[v for _, v in inits])
    np.testing.assert_array_equal(out, evaluated)


def test_layer_normalization_in_another_stash_type_is_the_kernels():
    """float64 X normalized in float32 (the default stash type): the kernel's casts."""
    nodes = [helper.make_node("LayerNormalization", ["x", "scale"], ["y"])]
    data = model_bytes(nodes, [("x", F64, (2, 8))], [("y", F64, None)], [("scale", np.ones(8))], opset=17)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    assert not _calls(method, _LayerNormCall)
