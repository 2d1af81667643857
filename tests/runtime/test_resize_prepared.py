"""Resize as a prepared call (runtime/kernels/resize_prepared.py): against onnxruntime's Resize
over modes, coordinate transformations, upsampling and downsampling, NCHW and NHWC; the same
bits as the kernel (offload.evaluate); the prepared path taken, bound and unbound."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import _util, resize_prepared
from offload.runtime.kernels.resize_prepared import _ResizeCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32, U8 = TensorProto.FLOAT, TensorProto.UINT8


def _resize_model(shape, elem, *, scales=None, sizes=None, axes=None, **attrs) -> bytes:
    inits = []
    inputs = ["x", "", "scales"] if scales is not None else ["x", "", "", "sizes"]
    if scales is not None:
        inits.append(("scales", np.array(scales, np.float32)))
    else:
        inits.append(("sizes", np.array(sizes, np.int64)))
    if axes is not None:
        attrs["axes"] = axes
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    return model_bytes([node], [("x", elem, list(shape))], [("y", elem, None)], inits, opset=19)


LIN = {"mode": "linear"}
CASES = [
    ((1, 3, 7, 9), {"scales": [1, 1, 2, 2], **LIN, "coordinate_transformation_mode": "half_pixel"}),
    ((2, 2, 5, 6), {"sizes": [2, 2, 11, 4], **LIN, "coordinate_transformation_mode": "align_corners"}),
    ((1, 4, 8, 8), {"scales": [1, 1, 0.5, 0.5], **LIN, "coordinate_transformation_mode": "asymmetric"}),
    ((1, 2, 6, 7), {"sizes": [1, 2, 1, 13], **LIN, "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ((1, 2, 9, 10), {"sizes": [1, 2, 4, 3], **LIN, "antialias": 1}),  # a stretched filter
    ((1, 3, 5, 6), {"scales": [1, 1, 1.6, 2.5], "mode": "cubic", "cubic_coeff_a": -0.5}),
    ((1, 3, 5, 6), {"sizes": [1, 3, 9, 4], "mode": "cubic", "exclude_outside": 1}),
    ((1, 6, 5, 4), {"sizes": [12, 10], "axes": [1, 2], **LIN}),  # NHWC, as a TFLite import gives
    (
        (1, 6, 5, 4),
        {"sizes": [11, 9], "axes": [1, 2], **LIN, "coordinate_transformation_mode": "align_corners"},
    ),
    ((3, 17), {"scales": [1, 3.0], **LIN}),
    (
        (1, 3, 4, 5),
        {"scales": [1, 1, 2, 3], "mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
    ),
    ((1, 3, 8, 9), {"sizes": [1, 3, 5, 4], "mode": "nearest", "nearest_mode": "floor"}),
    ((1, 3, 4, 5), {"sizes": [1, 3, 7, 9], "mode": "nearest", "nearest_mode": "ceil"}),
    ((1, 5, 4, 3), {"sizes": [9, 7], "axes": [1, 2], "mode": "nearest", "nearest_mode": "round_prefer_ceil"}),
]


def _prepared_step(method):
    (step,) = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::Resize"]
    return step


# float32 in every case; uint8 in nearest mode (a copy: onnxruntime rounds integer interpolation
# its own way)
TYPED = [(shape, spec, F32) for shape, spec in CASES] + [
    (shape, spec, U8) for shape, spec in CASES if spec["mode"] == "nearest"
]


@pytest.mark.parametrize("shape, spec, elem", TYPED, ids=[str(i) for i in range(len(TYPED))])
def test_prepared_resize_is_onnxruntimes_and_the_kernels(shape, spec, elem, monkeypatch):
    spec = dict(spec)
    data = _resize_model(shape, elem, **spec)
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    method = module.method("forward")
    step = _prepared_step(method)
    assert type(step) is _PreparedStep and type(step.call) is _ResizeCall

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel ran")

    if _util.compiled_loops() is not None or spec["mode"] == "nearest":  # else the kernel into the view
        monkeypatch.setattr(resize_prepared, "_kernel_into", refuse)
    monkeypatch.setattr(_PreparedStep, "_by_kernel", refuse)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(31)
    for _ in range(2):  # the second run with other values in the same arrays
        if elem == F32:
            x = rng.standard_normal(shape).astype(np.float32)
        else:
            x = rng.integers(0, 256, shape).astype(np.uint8)
        got = method.run({"x": x})["y"]
        want = session.run(None, {"x": x})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        if spec["mode"] == "nearest":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])
        # the unbound call (a step run alone) computes the same
        out = np.empty_like(got)
        step.call(out, x, None, *_constants(step, method))
        np.testing.assert_array_equal(out, got)


def _constants(step, method):
    return [method._initial[i] for i in step.in_slots[2:]]


def test_a_computed_scale_takes_the_kernels_values():
    nodes = [
        helper.make_node("Add", ["s0", "zero"], ["scales"]),
        helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear"),
    ]
    data = model_bytes(
        nodes,
        [("x", F32, [1, 2, 4, 5]), ("s0", F32, [4])],
        [("y", F32, None)],
        [("zero", np.zeros(4, np.float32))],
        opset=19,
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(32).standard_normal((1, 2, 4, 5)).astype(np.float32)
    feeds = {"x": x, "s0": np.array([1, 1, 2, 2], np.float32)}
    got = method.run(feeds)["y"]
    np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(got, offload.evaluate(program, feeds)["y"])


@pytest.mark.skipif(_util.compiled_loops() is None, reason="numba is not installed here (or OFFLOAD_JIT=0)")
def test_linear_resize_runs_the_compiled_loop():
    data = _resize_model((1, 3, 7, 9), F32, scales=[1, 1, 2, 2], mode="linear")
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    step = _prepared_step(method)
    x = np.zeros((1, 3, 7, 9), np.float32)
    out = np.empty((1, 3, 14, 18), np.float32)
    calls = step.call._calls(out, (x, None, method._initial[step.in_slots[2]]))
    loops = _util.compiled_loops()
    assert [c.func for c in calls] == [loops.resample, loops.resample_last]


def test_tflite_resizes_run_prepared_against_litert(monkeypatch):
    """The TFLite fixture of every RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR coordinate mode,
    through the default passes into a .pte: against LiteRT's stored outputs, the kernels' bits."""
    from tests.frontends.test_tflite import HERE, assert_close, oracle

    program = offload.load(HERE / "image_ops.tflite")
    method = offload.runtime.load(offload.save(offload.optimize(program))).method("forward")
    resizes = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::Resize"]
    assert len(resizes) >= 8 and all(type(s.call) is _ResizeCall for s in resizes)
    taken = []
    kernel_way = _PreparedStep._by_kernel

    def by_kernel(self, frame, out):
        taken.append(self.kernel.op_name)
        return kernel_way(self, frame, out)

    monkeypatch.setattr(_PreparedStep, "_by_kernel", by_kernel)
    feeds, want = oracle("image_ops")
    got = method.run(feeds)
    assert_close(got, want)
    for name, value in offload.evaluate(program, feeds).items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert "onnx::Resize" not in taken


def test_a_symbolic_shape_specializes_the_resize(monkeypatch):
    """An image of any size (a detector's): each repeated shape's plan runs the prepared call."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    scales = np.array([1, 1, 2, 2], np.float32)
    data = model_bytes([node], [("x", F32, [1, 3, "h", "w"])], [("y", F32, None)], [("scales", scales)])
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(33)
    for h, w in [(5, 7), (5, 7), (8, 6), (5, 7), (8, 6)]:
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=2e-6, atol=2e-6)
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])
    for h, w in [(5, 7), (8, 6)]:
        plan = method._specializations.entries.get(((1, 3, h, w),))
        steps = [s for s in plan.steps if getattr(s, "kernel", s).op_name == "onnx::Resize"]
        assert [type(s.call) for s in steps] == [_ResizeCall]
