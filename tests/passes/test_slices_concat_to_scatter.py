"""optimize_tensor_operation::slices_concat_to_scatter, on ONNX Loops that write one row per iteration."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from .helpers import F32, check, model, op_types

P = ["optimize_tensor_operation::slices_concat_to_scatter"]
N = 6
I64 = TensorProto.INT64


def _c(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def _loop_model(trips=N, start=0, step=1, gap=1, end_of_rows=None, counter="carried"):
    """A (N, 2) array A, row i replaced by i + 0.5 in each iteration: the rows before i, the new
    row, the rows from i + gap, concatenated (``end_of_rows``: Q's end along axis 0, default n;
    ``counter``: "carried" (i starts at ``start``, grows by ``step``) or "iteration")."""
    ends_rest = np.array([2], np.int64)
    i = "i_in" if counter == "carried" else "iter"
    body = [
        _c("one1", np.array([1], np.int64)),
        _c("rest", ends_rest),
        _c("zeros", np.array([0, 0], np.int64)),
        _c("zero1", np.array([0], np.int64)),
        _c("gap", np.array(gap, np.int64)),
        _c("step", np.array(step, np.int64)),
        _c("q_end", np.array([N if end_of_rows is None else end_of_rows, 2**40], np.int64)),
        _c("row_shape", np.array([1, 2], np.int64)),
        helper.make_node("Reshape", [i, "one1"], ["i1"]),
        helper.make_node("Concat", ["i1", "rest"], ["e1"], axis=0),
        helper.make_node("Slice", ["a_in", "zeros", "e1"], ["p"]),
        helper.make_node("Add", [i, "gap"], ["ig"]),
        helper.make_node("Reshape", ["ig", "one1"], ["ig1"]),
        helper.make_node("Concat", ["ig1", "zero1"], ["s2"], axis=0),
        helper.make_node("Slice", ["a_in", "s2", "q_end"], ["q"]),
        helper.make_node("Cast", [i], ["fi"], to=F32),
        _c("half", np.array(0.5, np.float32)),
        helper.make_node("Add", ["fi", "half"], ["v"]),
        helper.make_node("Expand", ["v", "row_shape"], ["x"]),
        helper.make_node("Concat", ["p", "x", "q"], ["a_out"], axis=0),
        helper.make_node("Add", ["i_in", "step"], ["i_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    graph = helper.make_graph(
        body,
        "body",
        [
            helper.make_tensor_value_info("iter", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("i_in", I64, []),
            helper.make_tensor_value_info("a_in", F32, [N, 2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("i_out", I64, []),
            helper.make_tensor_value_info("a_out", F32, None),
        ],
    )
    nodes = [helper.make_node("Loop", ["trips", "cond", "i0", "a"], ["i_final", "y"], body=graph)]
    inits = {"trips": np.array(trips, np.int64), "cond": np.array(True), "i0": np.array(start, np.int64)}
    return model(nodes, {"a": (F32, [N, 2])}, {"y": (F32, None)}, inits)


def _feeds():
    return {"a": np.random.default_rng(3).standard_normal((N, 2)).astype(np.float32)}


@pytest.mark.parametrize("counter", ["carried", "iteration"])
def test_rows_written_by_slices_and_concat_become_a_scatter(counter):
    out = check(_loop_model(counter=counter), P, _feeds(), rtol=0, atol=0)  # rows move, bit for bit
    types = op_types(out)
    assert types["ScatterND"] == 1 and types["Concat"] == 2 and types["Slice"] == 0, types


@pytest.mark.parametrize(
    "kwargs, why",
    [
        ({"gap": 2}, "Q skips a row: not a row replaced"),
        ({"start": 1}, "i reaches n: the concatenation grows the array there"),
        ({"step": 2}, "a counter that does not grow by 1"),
        ({"end_of_rows": N - 1}, "Q stops before the last row"),
    ],
)
def test_what_is_not_a_row_written_stays(kwargs, why):
    out = check(_loop_model(**kwargs), P, _feeds(), rtol=0, atol=0)
    assert op_types(out)["ScatterND"] == 0, why


def test_a_trip_count_from_an_input_is_left_alone():
    data = _loop_model()
    import onnx

    m = onnx.load_from_string(data)
    kept = [t for t in m.graph.initializer if t.name != "trips"]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    m.graph.input.append(helper.make_tensor_value_info("trips", I64, []))
    feeds = {**_feeds(), "trips": np.array(4, np.int64)}
    out = check(m.SerializeToString(), P, feeds, rtol=0, atol=0)
    assert op_types(out)["ScatterND"] == 0
