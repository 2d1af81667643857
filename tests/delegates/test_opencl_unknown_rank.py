"""Tensors whose rank is known only when the plan specializes, on opencl against onnxruntime.

PyTorch exports ``x.squeeze(dim)`` of a symbolic dim as an If on ``Shape(x)[dim] == 1`` whose
branches give different ranks, and an LSTM of a maybe-unbatched input as Ifs on the input's rank;
a Squeeze without axes of symbolic dims has no rank before it runs. The If's condition is known on
the host when the plan specializes, so only the branch taken is recorded. Every test asserts the
ops are delegated, and turns a CPU fallback during a run into a failure.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload

from .opencl_support import check, model, needs_opencl

pytestmark = [needs_opencl, pytest.mark.filterwarnings("error::RuntimeWarning")]
TOL = {"rtol": 1e-5, "atol": 1e-6}


def _i64(name, *v):
    return helper.make_tensor(name, TensorProto.INT64, [len(v)], list(v))


def _const(name, *v):
    return helper.make_node("Constant", [], [name], value=_i64(name + "_v", *v))


def _scalar(name, value):
    """A Constant node of one int64 (an int ``value``) or float32 element, rank 0."""
    kind = TensorProto.INT64 if isinstance(value, int) else TensorProto.FLOAT
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", kind, [], [value]))


def _if(cond, out, then_node, else_node):
    """An If node whose branches are one node each, their results undeclared."""
    branches = [
        helper.make_graph(
            [node], f"{out}_{k}", [], [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)]
        )
        for k, node in enumerate((then_node, else_node))
    ]
    return helper.make_node("If", [cond], [out], then_branch=branches[0], else_branch=branches[1])


def _squeeze_if(x, axis, out, tag):
    """``out = squeeze(x, axis)`` as PyTorch exports it: an If on ``Shape(x)[axis] == 1``."""
    return [
        helper.make_node("Shape", [x], [f"{tag}_shape"]),
        _const(f"{tag}_axis", axis),
        helper.make_node("Gather", [f"{tag}_shape", f"{tag}_axis"], [f"{tag}_dim"], axis=0),
        _const(f"{tag}_one", 1),
        helper.make_node("Equal", [f"{tag}_dim", f"{tag}_one"], [f"{tag}_cond"]),
        _if(
            f"{tag}_cond",
            out,
            helper.make_node("Squeeze", [x, f"{tag}_axis"], [f"{tag}_sq"]),
            helper.make_node("Identity", [x], [f"{tag}_id"]),
        ),
    ]


def _delegated(program) -> list[str]:
    """The top-level op types of ``program`` lowered to opencl."""
    return [op.op_type for op in offload.to_backend(program, "opencl").main.body.operations]


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_if_deciding_a_squeeze_on_a_shape_runs_the_branch_it_takes(tmp_path):
    nodes = [*_squeeze_if("x", 2, "s", "a"), helper.make_node("Relu", ["s"], ["y"])]
    p = model(nodes, [("x", ["N", 3, "T"])], ["y"])
    assert _delegated(p) == ["Delegate"]
    for shape in [(2, 3, 1), (2, 3, 4), (1, 3, 1)]:  # rank 2 out, then rank 3, then rank 2 again
        check(p, {"x": _data(*shape)}, tmp_path, whole=True, **TOL)


def test_nested_ifs_deciding_on_the_rank_of_a_rank_decided_value(tmp_path):
    # s has rank 2 or 3; an If on its rank (Size of its Shape) unsqueezes a rank-2 s, as PyTorch's
    # LSTM export does for an unbatched input; an LSTM, a Conv and a ReduceMean read the results
    rank_if = [
        helper.make_node("Shape", ["s"], ["s_shape"]),
        helper.make_node("Size", ["s_shape"], ["s_rank"]),
        _scalar("three", 3),
        helper.make_node("Equal", ["s_rank", "three"], ["batched"]),
        _const("zero", 0),
        _if(
            "batched",
            "seq",
            helper.make_node("Identity", ["s"], ["b_id"]),
            helper.make_node("Unsqueeze", ["s", "zero"], ["b_un"]),
        ),
    ]
    hidden = 5
    rng = np.random.default_rng(1)
    W = (rng.standard_normal((1, 4 * hidden, 4)) * 0.3).astype(np.float32)
    R = (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32)
    K = (rng.standard_normal((2, 2, 3)) * 0.3).astype(np.float32)
    nodes = [
        *_squeeze_if("x", 0, "s", "a"),
        *rank_if,
        helper.make_node("LSTM", ["seq", "W", "R"], ["Y", "Y_h"], hidden_size=hidden),
        helper.make_node("ReduceMean", ["Y"], ["m"], keepdims=1),
        helper.make_node("Conv", ["seq", "K"], ["c"], pads=[1, 1]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    p = model(nodes, [("x", ["T", 2, 4])], ["Y_h", "m", "y"], [("W", W), ("R", R), ("K", K)])
    assert _delegated(p) == ["Delegate"]
    for shape in [(1, 2, 4), (5, 2, 4)]:  # x[0] squeezed away and put back, then kept
        check(p, {"x": _data(*shape)}, tmp_path, whole=True, rtol=1e-4, atol=1e-5)


def test_if_on_a_small_graph_input_is_decided_on_the_host(tmp_path):
    # silero-vad picks its 16 kHz or 8 kHz network by an `sr` input: the If reads it on the host,
    # and its branches give results of different ranks
    nodes = [
        _scalar("rate", 16000),
        helper.make_node("Equal", ["sr", "rate"], ["wide"]),
        _const("axes", 0),
        _if(
            "wide",
            "y",
            helper.make_node("Sigmoid", ["x"], ["w_s"]),
            helper.make_node("ReduceSum", ["x", "axes"], ["w_r"], keepdims=0),
        ),
    ]
    p = model(nodes, [("x", ["N", 4]), ("sr", [], np.int64)], ["y"])
    assert _delegated(p) == ["Delegate"]
    for sr in (16000, 8000, 16000):
        check(p, {"x": _data(3, 4), "sr": np.array(sr, np.int64)}, tmp_path, whole=True, **TOL)


def test_squeeze_without_axes_of_symbolic_dims(tmp_path):
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["t"]),
        helper.make_node("Mul", ["t", "s"], ["y"]),
    ]
    p = model(nodes, [("x", ["N", 1, 2])], ["y"])
    assert _delegated(p) == ["Delegate"]
    for n in (1, 3):  # [2] then [3, 2]
        check(p, {"x": _data(n, 1, 2)}, tmp_path, whole=True, **TOL)


def test_pad_reflect_of_symbolic_shape_with_pads_from_a_shape_chain(tmp_path):
    # pads = [0, T // 4, 0, T // 4], computed from the input's shape: read on the host
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("last", 1),
        helper.make_node("Gather", ["shape", "last"], ["t"], axis=0),
        _const("four", 4),
        helper.make_node("Div", ["t", "four"], ["q"]),
        _const("zero", 0),
        helper.make_node("Concat", ["zero", "q", "zero", "q"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect"),
    ]
    p = model(nodes, [("x", ["N", "T"])], ["y"])
    assert _delegated(p) == ["Delegate"]
    for shape in [(2, 8), (1, 12)]:
        check(p, {"x": _data(*shape)}, tmp_path, whole=True, rtol=0, atol=0)


def test_if_read_on_the_device_needs_branches_of_one_rank():
    # a condition computed from tensor data is read on the device: both branches are recorded, so
    # they must give each output one rank
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        _scalar("zero", 0.0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        _const("axes", 0),
        _if(
            "positive",
            "y",
            helper.make_node("Relu", ["x"], ["p_r"]),
            helper.make_node("ReduceMax", ["x", "axes"], ["p_m"], keepdims=0),
        ),
    ]
    p = model(nodes, [("x", [3, 4])], ["y"])
    lowered = offload.to_backend(p, "opencl")
    assert [op.op_type for op in lowered.main.body.operations if op.op_type == "If"] == ["If"]
    from offload.delegates import registry

    reason = (
        registry.get("opencl")
        .compiler()
        .supports(next(op for op in p.main.body.operations if op.op_type == "If"))
    )
    assert not reason and "read on the device" in reason.reason


def test_conv_whose_input_channels_are_unknown_until_it_runs(tmp_path):
    # X's channel dim is not declared: the launcher checks it against W when it specializes
    W = (np.random.default_rng(2).standard_normal((4, 3, 1, 1)) * 0.5).astype(np.float32)
    p = model([helper.make_node("Conv", ["x", "W"], ["y"])], [("x", ["N", None, 5, 5])], ["y"], [("W", W)])
    assert _delegated(p) == ["Delegate"]
    check(p, {"x": _data(2, 3, 5, 5)}, tmp_path, whole=True, rtol=1e-5, atol=1e-5)
