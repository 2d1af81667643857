"""Opset 8's Scan (a batch axis, the scan axis 1, optional sequence_lens, ``directions``),
imported as a Loop over the batch of opset 9's Scan: against onnxruntime, which runs Scan-8
itself, through evaluate and through a saved .pte."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload import runtime
from offload.errors import ModelFormatError
from tests.reference import assert_close, onnxruntime_outputs, sum_tolerance

F = TensorProto.FLOAT


def _body() -> helper.GraphProto:
    """Two states (s: [2], n: []) and two scan inputs (x_t, w_t: [2]) of one batch element:
    s' = s + x_t·w_t + c (c captured from the outer graph), n' = n + 1, and per step s' and
    x_t - s."""
    nodes = [
        helper.make_node("Mul", ["x_t", "w_t"], ["xw"]),
        helper.make_node("Add", ["s", "xw"], ["t"]),
        helper.make_node("Add", ["t", "c"], ["s_out"]),
        helper.make_node("Add", ["n", "one"], ["n_out"]),
        helper.make_node("Identity", ["s_out"], ["y1_t"]),
        helper.make_node("Sub", ["x_t", "s"], ["y2_t"]),
    ]
    vi = helper.make_tensor_value_info
    return helper.make_graph(
        nodes,
        "body",
        [vi("s", F, [2]), vi("n", F, []), vi("x_t", F, [2]), vi("w_t", F, [2])],
        [vi("s_out", F, [2]), vi("n_out", F, []), vi("y1_t", F, [2]), vi("y2_t", F, [2])],
        [helper.make_tensor("one", F, [], [1.0])],
    )


def _model(batch: int, steps: int, lens: bool, directions) -> bytes:
    vi = helper.make_tensor_value_info
    attrs = {"body": _body(), "num_scan_inputs": 2}
    if directions is not None:
        attrs["directions"] = directions
    node = helper.make_node(
        "Scan", ["lens" if lens else "", "s0", "n0", "x", "w"], ["s", "n", "y1", "y2"], **attrs
    )
    inputs = [vi("s0", F, [batch, 2]), vi("n0", F, [batch]), vi("x", F, [batch, steps, 2])]
    inputs.append(vi("w", F, [batch, steps, 2]))
    if lens:
        inputs.insert(0, vi("lens", TensorProto.INT64, [batch]))
    outputs = [vi("s", F, None), vi("n", F, None), vi("y1", F, None), vi("y2", F, None)]
    graph = helper.make_graph(
        [node], "scan8", inputs, outputs, [helper.make_tensor("c", F, [2], [0.5, -0.25])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=7)
    return model.SerializeToString()


def _feeds(batch: int, steps: int, lens) -> dict:
    rng = np.random.default_rng(8)
    feeds = {
        "s0": rng.standard_normal((batch, 2)).astype(np.float32),
        "n0": rng.standard_normal(batch).astype(np.float32),
        "x": rng.standard_normal((batch, steps, 2)).astype(np.float32),
        "w": rng.standard_normal((batch, steps, 2)).astype(np.float32),
    }
    if lens is not None:
        feeds["lens"] = np.array(lens, np.int64)
    return feeds


@pytest.mark.parametrize(
    "lens, directions",
    [(None, None), (None, [1, 0]), ([4, 1, 3], None), ([4, 1, 3], [0, 1]), ([2, 4, 4], [1, 1])],
)
def test_scan8_matches_onnxruntime(lens, directions):
    batch, steps = 3, 4
    data = _model(batch, steps, lens is not None, directions)
    feeds = _feeds(batch, steps, lens)
    want = onnxruntime_outputs(data, feeds)
    program = offload.load(data)
    assert "Loop" in [op.op_type for op in program.main.body.operations]
    module = runtime.load(offload.save(program))
    for got in (offload.evaluate(program, feeds), module.run(feeds)):
        assert got.keys() == want.keys()
        for name, ref in want.items():
            # a state is a sum of up to 4 steps of 3 roundings each
            assert_close(got[name], ref, rtol=sum_tolerance(np.float32, 3 * steps), err_msg=name)


def test_scan8_outputs_past_a_sequence_length_are_zero():
    feeds = _feeds(2, 3, [1, 3])
    got = offload.evaluate(offload.load(_model(2, 3, True, None)), feeds)
    assert got["y1"].shape == (2, 3, 2)
    assert not got["y1"][0, 1:].any() and got["y1"][1].all()
    np.testing.assert_array_equal(got["n"], feeds["n0"] + np.array([1, 3], np.float32))


def test_scan8_whose_inputs_do_not_fit_its_body_is_a_format_error():
    import onnx

    model = onnx.load_from_string(_model(2, 3, False, None))
    model.graph.node[0].attribute[1].i = 5  # num_scan_inputs: more than the four inputs after lens
    with pytest.raises(ModelFormatError, match="not a valid Scan of opset 8"):
        offload.load(model.SerializeToString())
