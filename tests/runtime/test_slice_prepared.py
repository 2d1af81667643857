"""Slice's prepared call: bounds that are constants of the file are taken once per arena set,
bounds a run computes are read at every run; both against onnxruntime."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.tensor import _SliceCall
from offload.runtime.steps import _PreparedStep

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model() -> bytes:
    """y1: a constant-bounds Slice (negative start, step 2 on one axis, reversed on another) of
    x + 1; y2: rows k to k + 3 of x + 1, k a run's input (bounds computed by Concats): a static
    shape with bounds that change between runs."""
    inits = {
        "one": np.ones((), np.float32),
        "s": np.array([-5, 6], np.int64),
        "e": np.array([100, 0], np.int64),
        "ax": np.array([2, 1], np.int64),
        "st": np.array([2, -1], np.int64),
        "zero": np.array([0], np.int64),
        "big": np.array([1000], np.int64),
        "three": np.array([3], np.int64),
    }
    nodes = [
        helper.make_node("Add", ["x", "one"], ["a"]),
        helper.make_node("Slice", ["a", "s", "e", "ax", "st"], ["y1"]),
        helper.make_node("Concat", ["zero", "k"], ["starts"], axis=0),
        helper.make_node("Add", ["k", "three"], ["k3"]),
        helper.make_node("Concat", ["big", "k3"], ["ends"], axis=0),
        helper.make_node("Slice", ["a", "starts", "ends", "ax"], ["y2"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, [2, 8, 9]), helper.make_tensor_value_info("k", I64, [1])],
        [
            helper.make_tensor_value_info("y1", F32, [2, 6, 3]),
            helper.make_tensor_value_info("y2", F32, [2, 3, 9]),
        ],
        [numpy_helper.from_array(v, n) for n, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def test_constant_and_computed_bounds_match_onnxruntime_run_after_run():
    data = _model()
    module = offload.runtime.load(offload.save(offload.load(data)))
    steps = module.method("forward")._steps
    assert sum(isinstance(s, _PreparedStep) and isinstance(s.call, _SliceCall) for s in steps) == 2
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(9)
    for k in [2, 2, 5, 0, 5]:  # the same bounds twice, then others: computed bounds are read anew
        feeds = {"x": rng.standard_normal((2, 8, 9)).astype(np.float32), "k": np.array([k], np.int64)}
        got = module.run(feeds)
        want = dict(zip(["y1", "y2"], session.run(None, feeds)))
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
