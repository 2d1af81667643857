"""Pad as a prepared call (runtime/kernels/pad_prepared.py): copies into the output's view with
numpy.pad's values and onnxruntime's, for constant, reflect and edge padding of every axis;
computed pads, crops and reflections wider than an axis the kernel's way, with its values."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.pad_prepared import _PadCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _pad_model(shape, pads, mode, value=None, computed=False) -> bytes:
    inputs = ["x", "p"] if value is None else ["x", "p", "v"]
    inits = [("v", np.array(value, np.float32))] if value is not None else []
    nodes = [helper.make_node("Pad", inputs, ["y"], mode=mode)]
    if computed:  # pads the graph computes: p0 + 0 from an input
        nodes.insert(0, helper.make_node("Add", ["p0", "zero"], ["p"]))
        inits.append(("zero", np.zeros(len(pads), np.int64)))
        graph_inputs = [("x", F32, list(shape)), ("p0", TensorProto.INT64, [len(pads)])]
    else:
        inits.append(("p", np.array(pads, np.int64)))
        graph_inputs = [("x", F32, list(shape))]
    return model_bytes(nodes, graph_inputs, [("y", F32, None)], inits)


CASES = [
    ((1, 512), [0, 64, 0, 64], "reflect", None),  # Silero VAD's
    ((2, 3, 5), [1, 2, 0, 0, 2, 4], "reflect", None),
    ((2, 3, 5), [1, 0, 3, 1, 2, 2], "edge", None),
    ((2, 3, 5), [0, 1, 2, 1, 0, 3], "constant", 1.5),
    ((4, 6), [2, 1, 0, 3], "constant", None),
]


@pytest.mark.parametrize("shape, pads, mode, value", CASES)
def test_prepared_pad_is_numpys_and_onnxruntimes(shape, pads, mode, value):
    data = _pad_model(shape, pads, mode, value)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (step,) = [s for s in method._steps if getattr(s, "kernel", s).op_name == "onnx::Pad"]
    assert type(step) is _PreparedStep and type(step.call) is _PadCall
    rank = len(shape)
    width = list(zip(pads[:rank], pads[rank:]))
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(15)
    for _ in range(2):  # the second run with other values in the same arrays
        x = rng.standard_normal(shape).astype(np.float32)
        if mode == "constant":
            want = np.pad(x, width, mode="constant", constant_values=np.float32(value or 0))
        else:
            want = np.pad(x, width, mode=mode)
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, session.run(None, {"x": x})[0])


@pytest.mark.parametrize(
    "pads, mode",
    [([0, 1, 0, -2], "constant"), ([0, 7, 0, 1], "reflect")],
    ids=["crop", "reflection-wider-than-the-axis"],
)
def test_crops_and_wide_reflections_take_the_kernels_values(pads, mode):
    data = _pad_model((3, 5), pads, mode)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    x = np.random.default_rng(16).standard_normal((3, 5)).astype(np.float32)
    if mode == "reflect":  # onnxruntime refuses a reflection wider than the axis; numpy reflects again
        want = np.pad(x, [(0, 0), (7, 1)], mode="reflect")
    else:
        want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_array_equal(method.run({"x": x})["y"], want)


def test_pads_the_graph_computes_are_read_at_every_run():
    data = _pad_model((3, 5), [0, 1, 0, 2], "reflect", computed=True)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    x = np.random.default_rng(17).standard_normal((3, 5)).astype(np.float32)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for p in ([0, 1, 0, 2], [0, 2, 0, 1], [1, 0, 0, 2]):
        feeds = {"x": x, "p0": np.array(p, np.int64)}
        np.testing.assert_array_equal(method.run(feeds)["y"], session.run(None, feeds)[0])


I32, I64 = TensorProto.INT32, TensorProto.INT64


def _mixed_model() -> bytes:
    """y1: x + 1 padded on three axes, one of them cropped by a negative pad, with 2.5; y2: the
    same sum padded on axis 1 only (the axes input) by k before and 1 after, k a run's input; y3:
    an int32 input padded with the default 0; then each output feeds an Add, so the next run's
    arena holds other values where the borders go."""
    inits = {
        "one": np.ones((), np.float32),
        "p": np.array([0, 1, -2, 0, 3, 1], np.int64),
        "v": np.array(2.5, np.float32),
        "ax": np.array([1], np.int64),
        "after": np.array([1], np.int64),
        "pi": np.array([1, 0, 2, 1], np.int64),
    }
    nodes = [
        helper.make_node("Add", ["x", "one"], ["a"]),
        helper.make_node("Pad", ["a", "p", "v"], ["y1"], mode="constant"),
        helper.make_node("Concat", ["k", "after"], ["pk"], axis=0),
        helper.make_node("Pad", ["a", "pk", "", "ax"], ["y2"], mode="constant"),
        helper.make_node("Pad", ["n", "pi"], ["y3"]),
        helper.make_node("Add", ["y1", "one"], ["z1"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F32, [2, 5, 6]),
            helper.make_tensor_value_info("k", I64, [1]),
            helper.make_tensor_value_info("n", I32, [3, 4]),
        ],
        [
            helper.make_tensor_value_info("y1", F32, [2, 9, 5]),
            helper.make_tensor_value_info("y2", F32, None),
            helper.make_tensor_value_info("y3", I32, [6, 5]),
            helper.make_tensor_value_info("z1", F32, [2, 9, 5]),
        ],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def test_pads_values_axes_and_crops_in_one_model_run_after_run():
    data = _mixed_model()
    module = offload.runtime.load(offload.save(offload.load(data)))
    steps = module.method("forward")._steps
    assert sum(isinstance(s, _PreparedStep) and isinstance(s.call, _PadCall) for s in steps) == 2
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(4)
    for k in [2, 2, 0, 3]:
        feeds = {
            "x": rng.standard_normal((2, 5, 6)).astype(np.float32),
            "k": np.array([k], np.int64),
            "n": rng.integers(-9, 9, (3, 4)).astype(np.int32),
        }
        got = module.run(feeds)
        for name, want in zip(names, session.run(None, feeds)):
            np.testing.assert_array_equal(got[name], want, err_msg=name)
