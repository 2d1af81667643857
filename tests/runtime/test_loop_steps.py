"""Prepared steps inside loops (runtime/loop_steps.py): a Loop lowered into the chain runs its body's
steps as prepared calls of the shape specialization, checked against the types the noting run saw.
Values are checked against onnxruntime at every run (the noting run's kernels, the specialization's
prepared calls, and later runs whose trips have other shapes than noted)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.loop_reuse import _ReusedLoopStep
from offload.runtime.loop_steps import _LoopStep
from offload.runtime.steps import _BoundRun, _PreparedStep

from .onnx_graphs import model_bytes

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RTOL = ATOL = 1e-5


def _decoder() -> bytes:
    """A decoder step as a Loop body: carried state h (n, 16) through MatMul + Add + Tanh, a Reshape
    to its own Shape, a GRU-like gate (Gemm, Sigmoid, Mul, Sub), Gather of columns, Unsqueeze /
    Squeeze of constant axes, Concat, a Cast, and a Softmax as the scan output; a second carried value t counts
    trips as float (a value the body reads and writes every trip); the condition stays true."""
    rng = np.random.default_rng(1)
    body_inits = [
        numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.3, "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((16, 20)).astype(np.float32) * 0.3, "g"),
        numpy_helper.from_array(np.array([0, 3, 5, 7], np.int64), "cols"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
    ]
    body_nodes = [
        helper.make_node("MatMul", ["h", "w"], ["hw"]),
        helper.make_node("Add", ["hw", "b"], ["hb"]),
        helper.make_node("Tanh", ["hb"], ["cand"]),
        helper.make_node("Shape", ["cand"], ["cand_shape"]),
        helper.make_node("Reshape", ["cand", "cand_shape"], ["cand2"]),
        helper.make_node("Gemm", ["cand2", "g"], ["gz"]),
        helper.make_node("Slice", ["gz", "s0", "s16", "ax1"], ["zl"]),
        helper.make_node("Sigmoid", ["zl"], ["z"]),
        helper.make_node("Sub", ["one", "z"], ["nz"]),
        helper.make_node("Mul", ["z", "h"], ["keep"]),
        helper.make_node("Mul", ["nz", "cand"], ["new"]),
        helper.make_node("Add", ["keep", "new"], ["h2"]),
        helper.make_node("Gather", ["h2", "cols"], ["picked"], axis=1),
        helper.make_node("Unsqueeze", ["picked", "ax1"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax1"], ["sq"]),
        helper.make_node("Concat", ["sq", "sq"], ["cc"], axis=1),
        helper.make_node("Softmax", ["cc"], ["scan"], axis=-1),
        helper.make_node("Cast", ["i"], ["fi"], to=F32),
        helper.make_node("Add", ["t", "fi"], ["t2"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    body_inits += [
        numpy_helper.from_array(np.array([0], np.int64), "s0"),
        numpy_helper.from_array(np.array([16], np.int64), "s16"),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", BOOL, []),
            helper.make_tensor_value_info("h", F32, None),
            helper.make_tensor_value_info("t", F32, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("h2", F32, None),
            helper.make_tensor_value_info("t2", F32, None),
            helper.make_tensor_value_info("scan", F32, None),
        ],
        body_inits,
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h0"]),
        helper.make_node("Loop", ["M", "", "h0", "t0"], ["h_end", "t_end", "scans"], body=body),
    ]
    return model_bytes(
        nodes,
        [("x", F32, ["n", 16]), ("M", I64, []), ("t0", F32, [1])],
        [("h_end", F32, None), ("t_end", F32, None), ("scans", F32, None)],
    )


def _growing() -> bytes:
    """A Loop whose carried value grows every trip (Concat of a row: its shape changes from trip
    to trip, so its steps stay kernels) beside a state of one shape (Mul, Add: prepared)."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["s", "k"], ["sk"]),
            helper.make_node("Add", ["sk", "s"], ["s2"]),
            helper.make_node("Unsqueeze", ["s2", "ax0"], ["row"]),
            helper.make_node("Concat", ["rows", "row"], ["rows2"], axis=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", BOOL, []),
            helper.make_tensor_value_info("s", F32, None),
            helper.make_tensor_value_info("rows", F32, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("s2", F32, None),
            helper.make_tensor_value_info("rows2", F32, None),
        ],
        [
            numpy_helper.from_array(np.array([0], np.int64), "ax0"),
            numpy_helper.from_array(np.full(8, 0.5, np.float32), "k"),
        ],
    )
    nodes = [
        helper.make_node("Loop", ["M", "", "s0", "r0"], ["s_end", "rows_end"], body=body),
    ]
    return model_bytes(
        nodes,
        [("M", I64, []), ("s0", F32, [8]), ("r0", F32, [0, 8])],
        [("s_end", F32, None), ("rows_end", F32, None)],
    )


def _sized_by_value() -> bytes:
    """A Loop whose state's shape comes from an input's value (ConstantOfShape of k): runs with
    the same input shapes but another k give the body's values other shapes than the noting run
    saw, which the prepared calls' checks must send to the kernels (an Add into the noted shape
    would broadcast)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s", "x"], ["sx"]),
            helper.make_node("Tanh", ["sx"], ["s2"]),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond", BOOL, []),
            helper.make_tensor_value_info("s", F32, None),
        ],
        [helper.make_tensor_value_info("cond_out", BOOL, []), helper.make_tensor_value_info("s2", F32, None)],
    )
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["k"], ["s0"], value=numpy_helper.from_array(np.array([0.25], np.float32))
        ),
        helper.make_node("Loop", ["M", "", "s0"], ["s_end"], body=body),
    ]
    return model_bytes(nodes, [("k", I64, [1]), ("M", I64, []), ("x", F32, [1])], [("s_end", F32, None)])


def _runs(data: bytes):
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    return session, method


def _check(session, method, feeds: dict) -> dict:
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    got = method.run(feeds)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL, err_msg=name)
    return got


def _loop_steps(method) -> list:
    (spec,) = [e for e in method._specializations.entries.values() if hasattr(e, "steps")]
    steps = [s.step if isinstance(s, _ReusedLoopStep) else s for s in spec.steps]  # (loop_reuse.py)
    return [s for s in steps if isinstance(s, _LoopStep)]


def test_decoder_body_runs_prepared_and_matches_onnxruntime():
    session, method = _runs(_decoder())
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    feeds = {"x": x, "M": np.array(7, np.int64), "t0": np.zeros(1, np.float32)}
    first = _check(session, method, feeds)  # notes the loop's types: kernels
    for _ in range(3):  # the specialization's prepared calls, bound where their inputs are certain
        again = _check(session, method, feeds)
        for name in first:  # the same values as the kernels computed
            np.testing.assert_array_equal(again[name], first[name])
    ops = sorted({s.kernel.op_name.split("::")[1] for s in _loop_steps(method)})
    for op in ("Add", "Concat", "Gather", "Gemm", "MatMul", "Mul", "Shape", "Sigmoid", "Softmax", "Squeeze"):
        assert op in ops, ops
    assert "Reshape" not in ops  # to a shape the trip computes: its kernel
    (spec,) = [e for e in method._specializations.entries.values() if hasattr(e, "steps")]
    bound = [k.kernel.op_name for s in spec.fast_steps if isinstance(s, _BoundRun) for k in s.steps]
    assert "onnx::Tanh" in bound  # the trip's chain from the MatMul on is bound
    # another trip count at the same input shapes: the same specialization, other values
    _check(session, method, {**feeds, "M": np.array(3, np.int64)})
    _check(session, method, {**feeds, "x": rng.standard_normal((2, 16)).astype(np.float32)})
    # another batch: a new specialization
    x5 = rng.standard_normal((5, 16)).astype(np.float32)
    for _ in range(3):
        _check(session, method, {**feeds, "x": x5})


def test_zero_trips():
    session, method = _runs(_decoder())
    feeds = {"x": np.ones((2, 16), np.float32), "M": np.array(4, np.int64), "t0": np.zeros(1, np.float32)}
    for _ in range(2):
        _check(session, method, feeds)
    got = method.run({**feeds, "M": np.array(0, np.int64)})
    np.testing.assert_array_equal(got["h_end"], np.ones((2, 16), np.float32))
    np.testing.assert_array_equal(got["t_end"], np.zeros(1, np.float32))


def test_carried_value_that_grows_stays_a_kernel():
    session, method = _runs(_growing())
    feeds = {
        "M": np.array(6, np.int64),
        "s0": np.linspace(-1, 1, 8).astype(np.float32),
        "r0": np.zeros((0, 8), np.float32),
    }
    for _ in range(3):
        got = _check(session, method, feeds)
    assert got["rows_end"].shape == (6, 8)
    ops = [s.kernel.op_name for s in _loop_steps(method)]
    assert "onnx::Mul" in ops and "onnx::Add" in ops
    assert "onnx::Concat" not in ops  # its result's shape changed from trip to trip
    _check(session, method, {**feeds, "M": np.array(9, np.int64)})


def test_other_shapes_than_noted_take_the_kernels():
    session, method = _runs(_sized_by_value())
    feeds = {"k": np.array([3], np.int64), "M": np.array(4, np.int64), "x": np.array([0.5], np.float32)}
    for _ in range(3):
        _check(session, method, feeds)
    ops = {s.kernel.op_name for s in _loop_steps(method)}
    assert {"onnx::Add", "onnx::Tanh"} <= ops  # the state's steps (and the trip count's Less)
    for k in (5, 1, 3):  # the same input shapes (the same specialization), states of other sizes
        got = _check(session, method, {**feeds, "k": np.array([k], np.int64)})
        assert got["s_end"].shape == (k,)


def test_casts_and_comparisons_prepared_match_numpy():
    """Cast between numpy's plain types and the comparisons, prepared calls into arena views
    (tensor._CastCall, predicate_prepared.py), against numpy's astype and ufuncs in a static
    method, with NaN and infinities among the compared floats."""
    x = np.array(
        [[-2.5, -0.5, 0.0, 0.5], [1.5, np.nan, np.inf, -np.inf], [3e9, -3e9, 7.0, 255.9]], np.float32
    )
    y = np.array([[1, 0, 0, 0], [2, 0, 5, 0], [1, 1, 7, 255]], np.int32)
    nodes = [
        helper.make_node("Cast", ["y"], ["y64"], to=I64),
        helper.make_node("Cast", ["y"], ["yf"], to=F32),
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["y"], ["yb"], to=BOOL),
        helper.make_node("Less", ["x", "yf"], ["lt"]),
        helper.make_node("Equal", ["y64", "y64"], ["eq"]),
        helper.make_node("And", ["lt", "yb"], ["both"]),
        helper.make_node("Not", ["both"], ["nb"]),
    ]
    outs = [
        ("y64", I64),
        ("yf", F32),
        ("xd", TensorProto.DOUBLE),
        ("yb", BOOL),
        ("lt", BOOL),
        ("eq", BOOL),
        ("nb", BOOL),
    ]
    data = model_bytes(
        nodes, [("x", F32, [3, 4]), ("y", TensorProto.INT32, [3, 4])], [(n, t, [3, 4]) for n, t in outs]
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    prepared = {s.kernel.op_name for s in method._steps if isinstance(s, _PreparedStep)}
    assert {"onnx::Cast", "onnx::Less", "onnx::Equal", "onnx::And", "onnx::Not"} <= prepared
    yf = y.astype(np.float32)
    want = {
        "y64": y.astype(np.int64),
        "yf": yf,
        "xd": x.astype(np.float64),
        "yb": y.astype(bool),
        "lt": np.less(x, yf),
        "eq": np.ones((3, 4), bool),
        "nb": ~(np.less(x, yf) & y.astype(bool)),
    }
    for _ in range(2):
        got = method.run({"x": x, "y": y})
        for name, value in want.items():
            assert got[name].dtype == value.dtype, name
            np.testing.assert_array_equal(got[name], value, err_msg=name)
