"""Pad's prepared call (constant mode): the border filled and the input copied into the interior
of the planned output, pads that are constants found once, pads a run computes read at every
run; against onnxruntime."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.tensor import _PadCall
from offload.runtime.steps import _PreparedStep

F32, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def _model() -> bytes:
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


def test_constant_pads_and_computed_pads_match_onnxruntime_run_after_run():
    data = _model()
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
