"""The `opencl` backend's line ops (``scan.cl``: CumSum, CumProd, Hardmax, LpNormalization) on PoCL,
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates import registry

from .opencl_support import check, model, needs_opencl, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(9)


def _model(op, shape, dtype, axis_dtype=np.int64, **attrs):
    node = helper.make_node(op, ["x", "axis"], ["y"], **attrs)
    return model([node], [("x", list(shape), dtype), ("axis", [], axis_dtype)], [("y", dtype)])


def _data(op, shape, dtype):
    if dtype == np.float32:
        x = RNG.standard_normal(shape) * 3
        return (1 + x / 8).astype(np.float32) if op == "CumProd" else x.astype(np.float32)
    return RNG.integers(-3, 4, size=shape).astype(dtype)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize(
    "shape,axis", [((7,), 0), ((3, 4, 5), 1), ((3, 4, 5), -1), ((3, 4, 5), 0), ((2, 0, 3), 1)]
)
def test_cumsum(shape, axis, exclusive, reverse, tmp_path):
    p = _model("CumSum", shape, np.float32, exclusive=exclusive, reverse=reverse)
    feeds = {"x": _data("CumSum", shape, np.float32), "axis": np.array(axis, np.int64)}
    # the same order of additions as onnxruntime: equal bit for bit
    check(p, feeds, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
def test_cumsum_ints(dtype, axis_dtype, tmp_path):
    p = _model("CumSum", (4, 6), dtype, axis_dtype, reverse=1)
    feeds = {"x": _data("CumSum", (4, 6), dtype), "axis": np.array(1, axis_dtype)}
    check(p, feeds, tmp_path, whole=True)


def _cumprod_onnx(shape, dtype, **attrs):
    # CumProd is opset 26: a model of its own (opencl_support.model writes opset 21)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], **attrs)
    t = helper.np_dtype_to_tensor_dtype
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", t(np.dtype(dtype)), list(shape)),
         helper.make_tensor_value_info("axis", t(np.dtype(np.int64)), [])],
        [helper.make_tensor_value_info("y", t(np.dtype(dtype)), None)],
    )  # fmt: skip
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 26)])


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cumprod(dtype, exclusive, reverse, tmp_path):
    import onnxruntime as ort

    data = _cumprod_onnx((3, 5), dtype, exclusive=exclusive, reverse=reverse).SerializeToString()
    feeds = {"x": _data("CumProd", (3, 5), dtype), "axis": np.array(-1, np.int64)}
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (want,) = session.run(["y"], feeds)
    lowered = offload.to_backend(offload.load(data), "opencl", passes="none")
    assert [o.op_type for o in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    got = offload.runtime.load(str(tmp_path / "m.pte")).run(feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_cumsum_fp16(tmp_path):
    p = _model("CumSum", (2, 9), np.float32)
    lowered = offload.to_backend(
        p, "opencl", compile_specs={"opencl": {"precision": "fp16", "mixed": "0"}}, passes="none"
    )
    offload.save(lowered, tmp_path / "m.pte")
    x = (RNG.standard_normal((2, 9))).astype(np.float16).astype(np.float32)
    feeds = {"x": x, "axis": np.array(1, np.int64)}
    got = offload.runtime.load(str(tmp_path / "m.pte")).run(feeds)["y"]
    # accumulated in float32, each prefix rounded once to half
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=1e-3, atol=1e-3)


def test_axis_computed_from_data_stays_on_the_cpu():
    nodes = [
        helper.make_node("ArgMax", ["x"], ["a"], axis=0, keepdims=0),
        helper.make_node("CumSum", ["x", "a"], ["y"]),
    ]
    p = model(nodes, [("x", [4])], ["y"])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[1])
    assert not support and "data-dependent" in support.reason


def test_float64_is_refused():
    p = _model("CumSum", (4,), np.float64)
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "dtype" in support.reason


@pytest.mark.parametrize(
    "shape,axis", [((3, 4, 5), -1), ((3, 4, 5), 1), ((3, 4, 5), 0), ((6,), 0), ((2, 0, 3), 0)]
)
def test_hardmax(shape, axis, tmp_path):
    x = RNG.integers(0, 3, size=shape).astype(np.float32)  # ties: the first maximum wins
    p = model([helper.make_node("Hardmax", ["x"], ["y"], axis=axis)], [("x", list(shape))], ["y"])
    check(p, {"x": x}, tmp_path, whole=True, rtol=0, atol=0)


@pytest.mark.parametrize("p_", [1, 2])
@pytest.mark.parametrize("shape,axis", [((3, 4, 5), -1), ((3, 4, 5), 1), ((4, 3), 0)])
def test_lp_normalization(p_, shape, axis, tmp_path):
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p_)
    p = model([node], [("x", list(shape))], ["y"])
    x = RNG.standard_normal(shape).astype(np.float32)
    x[0] = 0  # whole lines of zeros along axis 1 and -1; along axis 0 one zero in each line
    check(p, {"x": x}, tmp_path, whole=True)


def test_lp_normalization_p3_is_refused():
    node = helper.make_node("LpNormalization", ["x"], ["y"], p=3)
    p = model([node], [("x", [3, 4])], ["y"])
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and "p=3" in support.reason
