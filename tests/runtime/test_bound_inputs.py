"""Bound runs that start at the method's inputs and go through Split (runtime/bound_runs.py): a
small static input has a place of its own in each arena set that a run copies it into, so the
steps that read it are bound; Split's prepared call binds its pieces as views taken once, a
Where of one condition as one copy of the input it picks, a Concat as one copy per input into
its part of the output. The results are checked against numpy (exact: copies, selections and
adds of small integers)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import offload
from offload.runtime.bound_runs import INPUT_PLACE_BYTES
from offload.runtime.kernels.where_prepared import _where_one
from offload.runtime.steps import _BoundRun, _PreparedOutputsStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _method(nodes, inputs, outputs, inits=()):
    program = offload.load(model_bytes(nodes, inputs, outputs, inits))
    return offload.runtime.load(offload.save(program)).method("forward")


def _split_model(shape):
    """x (+ c) → Split in two along the last axis → each half Where(cond, half, -half) → added."""
    half = shape[-1] // 2
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"]),
        helper.make_node("Split", ["a", "sizes"], ["p", "q"], axis=-1),
        helper.make_node("Neg", ["p"], ["np_"]),
        helper.make_node("Where", ["cond", "p", "np_"], ["wp"]),
        helper.make_node("Add", ["wp", "q"], ["y"]),
    ]
    c = np.arange(shape[-1], dtype=np.float32)
    inits = [("c", c), ("sizes", np.array([half, shape[-1] - half], np.int64))]
    inputs = [("x", F32, list(shape)), ("cond", TensorProto.BOOL, [])]
    outputs = [("y", F32, [*shape[:-1], half])]
    return nodes, inputs, outputs, inits, c


def _reference(x, cond, c):
    a = x.astype(np.float64) + c
    half = a.shape[-1] // 2
    p, q = a[..., :half], a[..., half:]
    return (p if cond else -p) + q


def test_small_inputs_and_split_run_as_one_bound_run():
    shape = (2, 3, 8)
    nodes, inputs, outputs, inits, c = _split_model(shape)
    method = _method(nodes, inputs, outputs, inits)
    assert sorted(method._input_places) == sorted(method._input_slots)
    assert isinstance(method._fast_steps[0], _BoundRun)
    (run,) = method._bound_runs
    assert [s.kernel.op_name for s in run] == [
        "onnx::Add",
        "onnx::Split",
        "onnx::Neg",
        "onnx::Where",
        "onnx::Add",
    ]
    assert any(isinstance(s, _PreparedOutputsStep) for s in run)
    # the Where of a 0-d condition is bound as one copy of the input it picks
    (_, _, bound), where = method._pool[-1], [s.kernel.op_name for s in run].index("onnx::Where")
    assert bound[0][where].func is _where_one
    rng = np.random.default_rng(0)
    for k in range(4):
        x = rng.integers(-50, 50, shape).astype(np.float32)
        cond = np.array(k % 2 == 0)
        got = method.run({"x": x, "cond": cond})["y"]
        np.testing.assert_array_equal(got, _reference(x, cond, c))


def test_an_input_over_the_limit_is_read_where_it_lies():
    """An input larger than INPUT_PLACE_BYTES gets no place: the steps reading it are not bound,
    those after them are, and the values are the same."""
    last = INPUT_PLACE_BYTES // 4 // 16 + 2  # 16 rows of float32: over the limit
    shape = (16, last)
    nodes, inputs, outputs, inits, c = _split_model(shape)
    method = _method(nodes, inputs, outputs, inits)
    x_slot, cond_slot = method._input_slots
    assert x_slot not in method._input_places and cond_slot in method._input_places
    assert method._bound_runs[0][0].kernel.op_name == "onnx::Split"
    x = np.random.default_rng(1).integers(-50, 50, shape).astype(np.float32)
    got = method.run({"x": x, "cond": np.array(False)})["y"]
    np.testing.assert_array_equal(got, _reference(x, False, c))


def test_a_result_that_is_an_input_is_copied_out_of_its_place():
    """A method that returns its input: each run's result is its own array, not the input's
    place that the next run overwrites."""
    method = _method(
        [helper.make_node("Relu", ["x"], ["r"])],
        [("x", F32, [4])],
        [("x", F32, [4]), ("r", F32, [4])],
    )
    first = np.array([1, -2, 3, -4], np.float32)
    got = method.run({"x": first})
    kept = got["x"]
    method.run({"x": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(kept, first)
    np.testing.assert_array_equal(got["r"], np.maximum(first, 0))


def test_a_split_whose_sizes_are_computed_reads_them_each_run():
    """Sizes that a step computes (not a constant of the file) are read at each run, bound or not."""
    method = _method(
        [
            helper.make_node("Add", ["s", "zero"], ["sizes"]),
            helper.make_node("Split", ["x", "sizes"], ["p", "q"], axis=0),
            helper.make_node("Add", ["p", "one"], ["y"]),
        ],
        [("x", F32, [6]), ("s", TensorProto.INT64, [2])],
        [("y", F32, [3]), ("q", F32, [3])],
        [("zero", np.zeros(2, np.int64)), ("one", np.ones(3, np.float32))],
    )
    x = np.arange(6, dtype=np.float32)
    got = method.run({"x": x, "s": np.array([3, 3])})
    np.testing.assert_array_equal(got["y"], x[:3] + 1)
    np.testing.assert_array_equal(got["q"], x[3:])


def test_a_bound_concat_copies_each_input_into_its_part():
    """Concat bound: each input copied into its part of the output (views taken once), the
    values numpy's concatenate gives, at every run."""
    from offload.runtime.kernels.tensor import _copy_pieces

    method = _method(
        [
            helper.make_node("Neg", ["s"], ["n"]),
            helper.make_node("Concat", ["n", "x", "c"], ["y"], axis=1),
        ],
        [("s", F32, [1, 3, 1, 4]), ("x", F32, [1, 1, 1, 4])],
        [("y", F32, [1, 6, 1, 4])],
        [("c", np.arange(8, dtype=np.float32).reshape(1, 2, 1, 4))],
    )
    (run,) = method._bound_runs
    assert [s.kernel.op_name for s in run] == ["onnx::Neg", "onnx::Concat"]
    assert method._pool[-1][2][0][1].func is _copy_pieces
    rng = np.random.default_rng(2)
    c = np.arange(8, dtype=np.float32).reshape(1, 2, 1, 4)
    for _ in range(3):
        s, x = (
            rng.standard_normal((1, 3, 1, 4)).astype(np.float32),
            rng.standard_normal((1, 1, 1, 4)).astype(np.float32),
        )
        got = method.run({"s": s, "x": x})["y"]
        np.testing.assert_array_equal(got, np.concatenate([-s, x, c], axis=1))
