"""A Concat that copies its parts from where the copies before it read them (runtime/
concat_fusions.py, runtime/kernels/concat_gathered.py): a streaming layer's window, Concat of
Where(initialized, state, zeros) and Reshape(newest frame), against onnxruntime, with the
fused call taken and its negative cases."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.concat_gathered import _GatheredConcatCall
from offload.runtime.kernels.tensor import _ConcatCall
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

RNG = np.random.default_rng(20261128)
I8 = TensorProto.INT8


def _window(outputs: list[str]) -> bytes:
    """w = Where(init, state, zeros); r = Reshape(frame); c = Concat(w, r, axis=1); s = c[:, 1:]
    (the next state); y = c + c (a reader of the whole window)."""
    nodes = [
        helper.make_node("Where", ["init", "state", "zeros"], ["w"]),
        helper.make_node("Reshape", ["frame", "shape"], ["r"]),
        helper.make_node("Concat", ["w", "r"], ["c"], axis=1),
        helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["s"]),
        helper.make_node("Add", ["c", "c"], ["y"]),
    ]
    inits = [
        ("zeros", np.full((1, 4, 1, 8), -128, np.int8)),
        ("shape", np.array([1, 1, 1, 8], np.int64)),
        ("starts", np.array([1], np.int64)),
        ("ends", np.array([5], np.int64)),
        ("axes", np.array([1], np.int64)),
    ]
    inputs = [("init", TensorProto.BOOL, []), ("state", I8, [1, 4, 1, 8]), ("frame", I8, [1, 8])]
    return model_bytes(nodes, inputs, [(n, I8, None) for n in outputs], inits)


@pytest.mark.parametrize(
    "outputs, kinds",
    [
        (["y", "s"], ("chosen", "reshaped")),
        (["y", "s", "w"], ("part", "reshaped")),  # w is a result too: the Where runs
    ],
    ids=["window", "where also a result"],
)
def test_a_window_concat_copies_from_the_sources_and_matches_onnxruntime(outputs, kinds):
    data = _window(outputs)
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    concat = [s for s in method._steps if type(s) is _PreparedStep and s.kernel.op_name == "onnx::Concat"]
    assert [type(s.call) for s in concat] == [_GatheredConcatCall]
    assert concat[0].call.kinds == kinds
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    state = RNG.integers(-128, 128, (1, 4, 1, 8)).astype(np.int8)
    for init in (False, True, True):  # the initial state, then the state each run leaves
        feeds = {
            "init": np.array(init),
            "state": state,
            "frame": RNG.integers(-128, 128, (1, 8)).astype(np.int8),
        }
        got = method.run(feeds)
        for name, want in zip(outputs, session.run(outputs, feeds)):
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        state = got["s"]
    assert method._pool[0][2] is not None  # the run's calls were bound


def test_a_part_whose_condition_has_several_elements_is_copied_as_it_is():
    """A Where of a condition per element is no choice of one input: the Concat copies its result."""
    nodes = [
        helper.make_node("Where", ["mask", "a", "b"], ["w"]),
        helper.make_node("Concat", ["w", "a"], ["c"], axis=0),
    ]
    inputs = [("mask", TensorProto.BOOL, [3]), ("a", I8, [3]), ("b", I8, [3])]
    data = model_bytes(nodes, inputs, [("c", I8, None)])
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    (concat,) = [s for s in method._steps if type(s) is _PreparedStep and s.kernel.op_name == "onnx::Concat"]
    assert type(concat.call) is _ConcatCall
    feeds = {
        "mask": np.array([True, False, True]),
        "a": np.array([1, 2, 3], np.int8),
        "b": np.array([7, 8, 9], np.int8),
    }
    np.testing.assert_array_equal(method.run(feeds)["c"], [1, 8, 3, 1, 2, 3])


def test_a_reshaped_source_that_lies_in_the_result_is_copied_first():
    """The arena place of the Reshape's input freed for the Concat's result: the newest frame lies
    where the window's first rows go, so its part is copied before the state's part writes there.
    Against numpy's concatenate of the values as they were; two such sources are refused."""
    out = np.zeros((1, 5, 1, 8), np.int8)
    frame = out.reshape(-1)[:8]  # the source of the last part, in the first part's place
    frame[...] = RNG.integers(-128, 128, 8)
    state = RNG.integers(-128, 128, (1, 4, 1, 8)).astype(np.int8)
    zeros = np.zeros_like(state)
    want = np.concatenate([state, frame.reshape(1, 1, 1, 8).copy()], axis=1)
    call = _GatheredConcatCall(1, ("chosen", "reshaped"), ((1, 4, 1, 8), (1, 1, 1, 8)))
    run = call.bind(out, np.array(True), state, zeros, frame)
    run()
    np.testing.assert_array_equal(out, want)
    two = _GatheredConcatCall(1, ("reshaped", "reshaped"), ((1, 4, 1, 8), (1, 1, 1, 8)))
    with pytest.raises(TypeError):
        two.bind(out, out.reshape(-1)[8:], frame)
