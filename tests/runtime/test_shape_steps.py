"""Steps that depend only on the input shapes: an exported model with a symbolic batch computes
its initial states and target shapes from Shape(input) at every run; the runtime keeps those
results for the last input shapes and stores them again while the shapes repeat
(runtime/shape_specializations.py, _find_shape_steps)."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.steps import _PreparedStep, _ShapeStep

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model() -> bytes:
    """y = x + ones([batch, 4]) and z = Reshape(x, [batch, 2, 2]), batch (symbolic) read from
    the shape of Relu(x): a value whose shape follows from the input's."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
        helper.make_node("Concat", ["n1", "four"], ["shape"], axis=0),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["ones"], value=helper.make_tensor("v", F32, [1], [1.0])
        ),
        helper.make_node("Add", ["x", "ones"], ["y"]),
        helper.make_node("Concat", ["n1", "two_two"], ["shape3"], axis=0),
        helper.make_node("Reshape", ["x", "shape3"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F32, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", F32, ["batch", 4]),
            helper.make_tensor_value_info("z", F32, None),
        ],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axis0"),
            numpy_helper.from_array(np.array([4], np.int64), "four"),
            numpy_helper.from_array(np.array([2, 2], np.int64), "two_two"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString()


def _method(data: bytes):
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


def test_shape_steps_are_kept_per_input_shape_and_match_onnxruntime():
    data = _model()
    method = _method(data)
    kept = [s for s in method._steps if isinstance(s, _ShapeStep)]
    # Concat, Gather and Unsqueeze have prepared calls, which stay bound calls of the known sizes
    assert sorted(s.kernel.op_name.split("::")[1] for s in kept) == ["ConstantOfShape", "Shape"]
    prepared = [s.kernel.op_name.split("::")[1] for s in method._steps if isinstance(s, _PreparedStep)]
    assert sorted(prepared) == ["Concat", "Concat", "Gather", "Unsqueeze"]
    calls = []
    for s in kept:
        fn = s.kernel.fn
        s.kernel.fn = lambda *a, _fn=fn, **k: calls.append(1) or _fn(*a, **k)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    # The first run at a batch computes them (and notes the values); the next one makes the shape
    # specialization of that batch, which holds them (runtime/folded_values.py) and is kept, so a
    # later run at that batch computes nothing either.
    for batch, fresh in [(2, True), (2, False), (5, True), (5, False), (2, False)]:
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        before = len(calls)
        got = method.run({"x": x})
        want_y, want_z = session.run(None, {"x": x})
        np.testing.assert_array_equal(got["y"], want_y)
        np.testing.assert_array_equal(got["z"], want_z)
        assert (len(calls) > before) == fresh, (batch, fresh)


def test_a_shape_depending_on_input_data_is_not_kept():
    # Shape of an intermediate (here NonZero's result, whose length is data) stays a kernel step.
    graph = helper.make_graph(
        [
            helper.make_node("NonZero", ["x"], ["nz"]),
            helper.make_node("Shape", ["nz"], ["s"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F32, [6])],
        [helper.make_tensor_value_info("s", I64, [2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    method = _method(m.SerializeToString())
    assert not any(isinstance(s, _ShapeStep) for s in method._steps)
    for x in ([1, 0, 2, 0, 0, 3], [0, 0, 0, 0, 0, 1]):
        got = method.run({"x": np.array(x, np.float32)})["s"]
        np.testing.assert_array_equal(got, [1, np.count_nonzero(x)])


def test_threads_with_different_shapes_each_get_their_own():
    data = _model()
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    errors = []

    def work(batch: int) -> None:
        x = np.full((batch, 4), batch, np.float32)
        want_y, want_z = session.run(None, {"x": x})
        for _ in range(200):
            got = method.run({"x": x})
            if not (np.array_equal(got["y"], want_y) and np.array_equal(got["z"], want_z)):
                errors.append(batch)
                return

    threads = [threading.Thread(target=work, args=(b,)) for b in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_method_with_a_sequence_input_keys_on_the_tensors_shapes():
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("SequenceLength", ["seq"], ["n"]),
            helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
            helper.make_node("Concat", ["s", "n1"], ["y"], axis=0),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", F32, ["batch", 4]),
            helper.make_tensor_sequence_value_info("seq", F32, None),
        ],
        [helper.make_tensor_value_info("y", I64, [3])],
        [numpy_helper.from_array(np.array([0], np.int64), "axis0")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    method = _method(m.SerializeToString())
    assert any(isinstance(s, _ShapeStep) for s in method._steps)
    for batch, items in [
        (2, [np.zeros(2, np.float32), np.zeros(3, np.float32)]),
        (2, [np.zeros(1, np.float32)]),
    ]:
        got = method.run({"x": np.zeros((batch, 4), np.float32), "seq": items})["y"]
        np.testing.assert_array_equal(got, [batch, 4, len(items)])
