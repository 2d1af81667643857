"""Shared by the ai.onnx.ml kernel tests: one-node models, run by onnxruntime and by offload's
CPU executor through a saved .pte, compared output by output."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
import offload.runtime
from offload.ir import TensorType

ML = "ai.onnx.ml"
# onnxruntime's float32 GEMM and transforms against offload's: a few ulps of values of order 1.
CLOSE = {"rtol": 1e-5, "atol": 1e-6}


def _info(name: str, kind):
    """A graph port: a numpy dtype makes a tensor of unknown shape, ("map", key type) a sequence of
    maps from that key type to float (what ZipMap returns)."""
    if isinstance(kind, tuple):
        value = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
        key = TensorProto.INT64 if kind[1] == "int64" else TensorProto.STRING
        return helper.make_value_info(
            name, helper.make_sequence_type_proto(helper.make_map_type_proto(key, value))
        )
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(kind)), None)


def ml_model(nodes, feeds: dict, outputs: dict) -> bytes:
    """A model of ai.onnx.ml ``nodes``: inputs typed by the arrays of ``feeds``, ``outputs`` as
    name -> kind (see ``_info``)."""
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    graph = helper.make_graph(nodes, "g", inputs, [_info(k, v) for k, v in outputs.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets).SerializeToString()


def ml_node(op_type: str, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain=ML, **attrs)


def run_offload(data: bytes, feeds: dict) -> dict:
    return offload.runtime.load(offload.save(offload.load(data))).run(feeds)


def run_onnxruntime(data: bytes, feeds: dict) -> dict:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def assert_same(got, want, rtol: float = CLOSE["rtol"], atol: float = CLOSE["atol"], what: str = "") -> None:
    if isinstance(want, list):  # ZipMap: a list of {label: score}
        assert isinstance(got, list) and len(got) == len(want), what
        for g, w in zip(got, want):
            assert list(g) == list(w), (what, list(g), list(w))
            assert all(type(k) is type(j) for k, j in zip(g, w)), what
            np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=rtol, atol=atol, err_msg=what)
        return
    got = np.asarray(got)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if want.dtype.kind in "OUS":
        assert got.tolist() == want.tolist(), what
    elif want.dtype.kind == "f":
        assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    else:
        assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=what)


def assert_inferred(program, want: dict) -> None:
    """Each output's inferred IR type (ir/infer_ml.py) agrees with onnxruntime's result: the
    element type, the rank and every dimension it knows."""
    for v in program.main.outputs:
        t = v.type
        if not isinstance(t, TensorType) or t.shape is None:
            continue
        w = np.asarray(want[v.name])
        assert t.dtype.numpy == w.dtype, (v.name, t, w.dtype)
        assert len(t.shape) == w.ndim and all(d is None or d == s for d, s in zip(t.shape, w.shape)), (
            v.name,
            t,
            w.shape,
        )


def check(nodes, feeds: dict, outputs: dict, **tolerance) -> dict:
    """offload's .pte against onnxruntime on the model; offload's outputs."""
    data = ml_model(nodes, feeds, outputs)
    want = run_onnxruntime(data, feeds)
    program = offload.load(data)
    assert_inferred(program, want)
    got = offload.runtime.load(offload.save(program)).run(feeds)
    assert set(got) == set(want)
    for k in want:
        assert_same(got[k], want[k], what=k, **tolerance)
    return got
