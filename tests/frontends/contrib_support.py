"""Shared by the com.microsoft contrib op tests: one-node models run by onnxruntime and offload."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload

# float32 arithmetic: an elementwise chain of a few ops is within a few ulps (2^-23 ≈ 1.2e-7
# relative); sums of n terms (normalizations, products, attention) add about n ulps of their
# magnitude, and the tests keep n ≤ 64 on values of order 1.
ELEMENTWISE = {"rtol": 1e-6, "atol": 1e-6}
SUMS = {"rtol": 1e-5, "atol": 1e-5}


def contrib_model(nodes, feeds: dict, outputs, inits=(), opset: int = 21) -> bytes:
    """A model of ``nodes`` (domain com.microsoft where a node says so): inputs typed by the
    arrays of ``feeds``, ``outputs`` as names (float32) or (name, numpy dtype)."""

    def info(name, array):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)
        )

    outs = []
    for o in outputs:
        name, dtype = (o, np.float32) if isinstance(o, str) else o
        outs.append(
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)
        )
    graph = helper.make_graph(
        nodes,
        "g",
        [info(k, v) for k, v in feeds.items()],
        outs,
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, ir_version=10, opset_imports=opsets)
    return model.SerializeToString()


def node(op_type: str, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain="com.microsoft", **attrs)


def onnxruntime_run(data: bytes, feeds: dict) -> dict:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def compare(data: bytes, feeds: dict, rtol: float, atol: float, exact_ints: bool = True) -> dict:
    """offload.evaluate against onnxruntime on the same model; offload's results."""
    want = onnxruntime_run(data, feeds)
    got = offload.evaluate(offload.load(data), feeds)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (
            k,
            got[k].dtype,
            got[k].shape,
            v.dtype,
            v.shape,
        )
        if np.issubdtype(v.dtype, np.integer) and exact_ints:
            np.testing.assert_array_equal(got[k], v, err_msg=k)
        else:
            np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)
    return got


FLOAT = TensorProto.FLOAT


def normal(rng, *shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def attention_mask(rng, kind: str, b: int, s: int, t: int) -> np.ndarray:
    """A mask_index of onnxruntime's attention ops over t keys: "1d" (each row's valid length),
    "1d_start" (each row's end, then each row's start), "2d" (B x T) or "3d" (B x S x T)."""
    if kind == "1d":
        return np.array([t, t - 2][:b], np.int32)
    if kind == "1d_start":
        return np.array([t, t - 1, 1, 2][: 2 * b], np.int32)
    if kind == "2d":
        m = np.ones((b, t), np.int32)
        m[1, -3:] = 0
        return m
    m = (rng.random((b, s, t)) > 0.3).astype(np.int32)
    m[..., 0] = 1
    return m
