"""Shape specializations: a method whose values have symbolic shapes (an exported model's batch, image
size or sequence length) makes, at the second run with the same input shapes, a plan for them:
prepared calls writing into an arena of its own, bound as a static method's are
(runtime/shape_specializations.py, _ShapeSpecialization). Values are checked against onnxruntime (or numpy), at repeated
shapes, new ones, shapes coming back, and from threads running different shapes at once."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime import shape_specializations
from offload.runtime.shape_specializations import _ShapeSpecialization
from offload.runtime.steps import _KernelPair, _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT
RTOL = ATOL = 1e-5


def _convnet() -> bytes:
    """A small convnet with a symbolic batch and image size: Conv + Relu, a depthwise stride-2
    Conv + HardSwish, a squeeze-excite gate (GlobalAveragePool, Sigmoid, Mul), a 1 x 1 Conv and a
    residual Add."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], group=8, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c2"], ["h"]),
        helper.make_node("GlobalAveragePool", ["h"], ["g"]),
        helper.make_node("Sigmoid", ["g"], ["s"]),
        helper.make_node("Mul", ["h", "s"], ["m"]),
        helper.make_node("Conv", ["m", "w3"], ["c3"]),
        helper.make_node("Add", ["c3", "h"], ["y"]),
    ]
    inits = [
        ("w1", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        ("b1", rng.standard_normal(8).astype(np.float32)),
        ("w2", rng.standard_normal((8, 1, 3, 3)).astype(np.float32)),
        ("b2", rng.standard_normal(8).astype(np.float32)),
        ("w3", rng.standard_normal((8, 8, 1, 1)).astype(np.float32)),
    ]
    return model_bytes(nodes, [("x", F32, ["n", 3, "h", "w"])], [("y", F32, ["n", 8, "oh", "ow"])], inits)


def _method(data: bytes):
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


def _prepared_ops(steps) -> list[str]:
    """The op types the prepared steps run, both of a fused Conv and its activation (not the
    moves of an If's results that a straight path prepares, runtime/straight_paths.py)."""
    out = []
    for s in steps:
        if isinstance(s, _PreparedStep) and s.kernel.op_name != "move":
            kernels = [s.kernel.first, s.kernel.second] if isinstance(s.kernel, _KernelPair) else [s.kernel]
            out.extend(k.op_name.split("::")[1] for k in kernels)
    return sorted(out)


def _plan(method, shapes: tuple) -> _ShapeSpecialization | None:
    entry = method._specializations.entries.get(shapes)
    return entry if isinstance(entry, _ShapeSpecialization) else None


def test_a_repeated_shape_runs_prepared_calls_and_matches_onnxruntime():
    data = _convnet()
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    kept = []  # earlier results: a later run at the same shape must not write over them
    for shape in [(1, 16, 16), (1, 16, 16), (2, 9, 13), (1, 16, 16), (2, 9, 13), (2, 9, 13), (1, 16, 16)]:
        n, h, w = shape
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        got = method.run({"x": x})["y"]
        (want,) = session.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        kept.append((got, want))
    for got, want in kept:
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    for shape in [(1, 3, 16, 16), (2, 3, 9, 13)]:
        plan = _plan(method, (shape,))
        assert plan is not None, shape
        assert _prepared_ops(plan.steps) == sorted(
            ["Conv", "Relu", "Conv", "HardSwish", "GlobalAveragePool", "Sigmoid", "Mul", "Conv", "Add"]
        )
        # a Conv and its activation run as one call in the plan as in a static method
        assert (
            sum(isinstance(s, _PreparedStep) and isinstance(s.kernel, _KernelPair) for s in plan.steps) == 2
        )
        assert plan.bound_runs  # the calls are bound to the plan's arena


def test_a_first_shape_runs_the_kernels_and_a_plan_follows_at_the_second_run():
    data = _convnet()
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).standard_normal((1, 3, 11, 7)).astype(np.float32)
    key = (x.shape,)
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(method.run({"x": x})["y"], want, rtol=RTOL, atol=ATOL)
    assert isinstance(method._specializations.entries[key], dict)  # what the first run noted
    np.testing.assert_allclose(method.run({"x": x})["y"], want, rtol=RTOL, atol=ATOL)
    assert _plan(method, key) is not None


def test_a_steady_run_allocates_no_intermediate():
    """At a repeated shape the intermediates live in the plan's arena: what a run allocates is
    about its result's copy (64 KiB), not the 256 KiB of the first Conv's output (without the
    plan: 840 KiB)."""
    method = _method(_convnet())
    x = np.random.default_rng(3).standard_normal((2, 3, 64, 64)).astype(np.float32)
    for _ in range(3):
        y = method.run({"x": x})["y"]
    tracemalloc.start()
    try:
        method.run({"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < y.nbytes + 16384, (peak, y.nbytes)


def test_threads_running_different_shapes_get_their_own_plans():
    data = _convnet()
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    shapes = [(1, 12, 12), (2, 8, 10), (1, 12, 12), (3, 6, 5)]  # two threads share a shape
    cases = []
    for k, (n, h, w) in enumerate(shapes):
        x = np.random.default_rng(10 + k).standard_normal((n, 3, h, w)).astype(np.float32)
        cases.append((x, session.run(None, {"x": x})[0]))
    errors = []

    def work(x, want) -> None:
        for _ in range(40):
            got = method.run({"x": x})["y"]
            if not np.allclose(got, want, rtol=RTOL, atol=ATOL):
                errors.append(x.shape)
                return

    threads = [threading.Thread(target=work, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _plan(method, ((1, 3, 12, 12),)) is not None


def test_more_shapes_than_the_plans_kept_stay_right(monkeypatch):
    monkeypatch.setattr(shape_specializations, "SHAPE_SPECIALIZATIONS", 2)
    data = _convnet()
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for size in [5, 6, 7, 5, 6, 7, 8, 5, 5]:
        x = rng.standard_normal((1, 3, size, size + 1)).astype(np.float32)
        for _ in range(2):
            np.testing.assert_allclose(
                method.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=RTOL, atol=ATOL
            )
        assert len(method._specializations.entries) <= 2


def test_a_value_whose_shape_depends_on_data_is_not_planned():
    # NonZero's result has as many columns as x has nonzeros: at one input shape, a Relu of it
    # changes shape from run to run, so it stays a kernel step.
    data = model_bytes(
        [
            helper.make_node("NonZero", ["x"], ["nz"]),
            helper.make_node("Cast", ["nz"], ["c"], to=F32),
            helper.make_node("Neg", ["c"], ["neg"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Add", ["neg", "one"], ["y"]),
        ],
        [("x", F32, ["n"])],
        [("y", F32, None), ("r", F32, ["n"])],
        [("one", np.array(1.0, np.float32))],
    )
    method = _method(data)
    for x in (
        [1, 0, 2, 0, 3, 0],
        [0, 0, 0, 0, 0, 4],
        [5, 6, 0, 7, 8, 9],
        [0, 0, 0, 0, 0, 0],
        [1, 2, 3, 4, 5, 6],
    ):
        x = np.array(x, np.float32)
        got = method.run({"x": x})
        np.testing.assert_array_equal(got["y"], 1 - np.stack(np.nonzero(x)).astype(np.float32))
        np.testing.assert_array_equal(got["r"], np.maximum(x, 0))
    plan = _plan(method, ((6,),))
    assert plan is not None
    assert _prepared_ops(plan.steps) == ["Relu"]


def test_the_plan_arena_never_gives_two_live_values_the_same_bytes():
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        starts = rng.integers(-1, 30, n)
        spans = {v: (int(a), int(a + rng.integers(0, 10))) for v, a in enumerate(starts)}
        sizes = {v: int(rng.integers(0, 5000)) for v in range(n)}
        offsets, total = shape_specializations._place(sizes, spans)
        for v in range(n):
            assert offsets[v] % 64 == 0 and offsets[v] + sizes[v] <= total
            for u in range(v):
                live_together = spans[u][0] <= spans[v][1] and spans[v][0] <= spans[u][1]
                apart = offsets[u] + sizes[u] <= offsets[v] or offsets[v] + sizes[v] <= offsets[u]
                assert apart or not live_together or 0 in (sizes[u], sizes[v]), (u, v)
    # a value written after another's last read takes its bytes
    offsets, total = shape_specializations._place({0: 4096, 1: 4096}, {0: (0, 1), 1: (2, 3)})
    assert offsets == {0: 0, 1: 0} and total == 4096


def test_a_resize_by_constant_scales_is_planned_with_what_follows():
    """Resize's output shape follows from its input's shape and the values of its scales
    (ir.SHAPE_FROM_VALUES): in a plan the Resize and the Conv after it are prepared (a segmenter's
    decoder)."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="linear"),
        helper.make_node("Conv", ["u", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    inits = [
        ("scales", np.array([1, 1, 2, 2], np.float32)),
        ("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
    ]
    data = model_bytes(nodes, [("x", F32, ["n", 3, "h", "w"])], [("y", F32, ["n", 4, "oh", "ow"])], inits)
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 7, 9), (1, 3, 7, 9), (2, 3, 5, 4), (2, 3, 5, 4), (1, 3, 7, 9)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(
            method.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=RTOL, atol=ATOL
        )
    plan = _plan(method, ((1, 3, 7, 9),))
    assert plan is not None and _prepared_ops(plan.steps) == ["Conv", "Relu", "Resize"]


def _branchy_conv1d() -> bytes:
    """A 1-D convnet with a symbolic length behind an If on a scalar input (as Silero VAD picks
    its 16 kHz or 8 kHz branch): the CPU executor lowers the If to forward jumps."""
    rng = np.random.default_rng(3)

    def branch(name, w, pads, strides):
        return helper.make_graph(
            [
                helper.make_node("Conv", ["x", w, "b"], [f"{name}_c"], pads=pads, strides=strides),
                helper.make_node("Relu", [f"{name}_c"], [f"{name}_y"]),
            ],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", F32, None)],
        )

    nodes = [
        helper.make_node("Greater", ["sr", "k"], ["big"]),
        helper.make_node(
            "If",
            ["big"],
            ["t"],
            then_branch=branch("hi", "w1", [2, 1], [2]),
            else_branch=branch("lo", "w2", [0, 0], [1]),
        ),
        helper.make_node("Conv", ["t", "w3"], ["y"], pads=[1, 1], dilations=[2], group=2),
    ]
    inits = [
        ("w1", rng.standard_normal((4, 2, 5)).astype(np.float32)),
        ("w2", rng.standard_normal((4, 2, 3)).astype(np.float32)),
        ("b", rng.standard_normal(4).astype(np.float32)),
        ("w3", rng.standard_normal((6, 2, 3)).astype(np.float32)),
        ("k", np.array(10000, np.int64)),
    ]
    return model_bytes(
        nodes, [("x", F32, ["n", 2, "l"]), ("sr", TensorProto.INT64, [])], [("y", F32, ["n", 6, "m"])], inits
    )


def test_steps_past_an_if_are_prepared_per_shape_and_match_onnxruntime():
    """Shape specializations reach past the forward jumps of an If: the 1-D Convs inside the
    branch taken become prepared calls (the 2-D recipe at height 1) at a repeated shape, and
    each run matches onnxruntime whichever branch it takes. ``sr`` only decides the branch: its
    value joins the input shapes in the key, so that each key takes one branch and the If's
    result, and the Conv after it, have one shape a key (runtime/decided_paths.py)."""
    data = _branchy_conv1d()
    method = _method(data)
    assert method._deciding == (1,)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for n, length, sr in [
        (1, 40, 16000),
        (1, 40, 16000),
        (1, 40, 8000),
        (2, 33, 8000),
        (2, 33, 8000),
        (1, 40, 16000),
    ]:
        feeds = {"x": rng.standard_normal((n, 2, length)).astype(np.float32), "sr": np.array(sr, np.int64)}
        got = method.run(feeds)["y"]
        (want,) = session.run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    sr = np.array(16000, np.int64).tobytes()
    assert _plan(method, ((1, 2, 40), ((), np.array(8000, np.int64).tobytes()))) is None  # run once
    plan = _plan(method, ((1, 2, 40), ((), sr)))
    assert plan is not None
    # the taken branch's Conv with its Relu and the last Conv, which reads the If's result; the
    # comparison of sr that decides the branch is a value the key fixes (folded_values.py)
    assert _prepared_ops(plan.steps) == ["Conv", "Conv", "Relu"]
    assert "Greater" in [s.kernel.op_name.split("::")[-1] for s in method._steps if hasattr(s, "kernel")]


def test_an_input_that_is_data_as_well_does_not_decide_branches():
    """``sr`` also scales the output: its value is data, not only a choice of branch, so it does
    not join the key (each new value would make a specialization anew); the If's result then has
    a shape the key does not decide, and the Conv after it stays a kernel."""
    model = onnx.load_from_string(_branchy_conv1d())
    graph = model.graph
    graph.node.append(helper.make_node("Cast", ["sr"], ["srf"], to=F32))
    graph.node[-2].output[0] = "y0"
    graph.node.append(helper.make_node("Mul", ["y0", "srf"], ["y"]))
    data = model.SerializeToString()
    method = _method(data)
    assert method._deciding == ()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for sr in [16000, 16000, 8000, 8000]:
        feeds = {"x": rng.standard_normal((1, 2, 40)).astype(np.float32), "sr": np.array(sr, np.int64)}
        np.testing.assert_allclose(method.run(feeds)["y"], session.run(None, feeds)[0], rtol=RTOL, atol=5e-2)
    plan = _plan(method, ((1, 2, 40), ()))
    # sr's Cast and comparison are prepared calls too (one Conv: the one after the If stays a kernel)
    assert plan is not None and _prepared_ops(plan.steps) == ["Cast", "Conv", "Greater", "Relu"]


def test_an_if_on_the_input_shapes_is_followed_by_prepared_steps():
    """An exported model's If on what the shapes say (squeeze a batch of one): each key takes one
    branch, the If's result has one shape a key, and the Relu after it is prepared; at batch 1
    and 2 the results match onnxruntime."""
    squeeze = helper.make_graph(
        [helper.make_node("Squeeze", ["x", "zero"], ["s"])],
        "then",
        [],
        [helper.make_tensor_value_info("s", F32, None)],
    )
    keep = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["k"])],
        "else",
        [],
        [helper.make_tensor_value_info("k", F32, None)],
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"]),
        helper.make_node("Equal", ["n", "one"], ["single"]),
        helper.make_node("If", ["single"], ["t"], then_branch=squeeze, else_branch=keep),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    inits = [("zero", np.array([0], np.int64)), ("one", np.array([1], np.int64))]
    data = model_bytes(nodes, [("x", F32, ["n", 5])], [("y", F32, None)], inits)
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    for n in [1, 1, 2, 2, 1]:
        x = rng.standard_normal((n, 5)).astype(np.float32)
        np.testing.assert_array_equal(method.run({"x": x})["y"], session.run(None, {"x": x})[0])
    for n in (1, 2):
        plan = _plan(method, ((n, 5),))
        assert plan is not None and "Relu" in _prepared_ops(plan.steps)


@pytest.mark.parametrize(
    "node, extra",
    [
        (helper.make_node("Einsum", ["x", "e"], ["t"], equation="abc,cd->abd"), [("e", (8, 8))]),
        (helper.make_node("CumSum", ["x", "axis"], ["t"]), [("axis", None)]),
        (helper.make_node("Hardmax", ["x"], ["t"], axis=-1), []),
        (helper.make_node("ArgMax", ["x"], ["i"], axis=-1), []),
    ],
    ids=["Einsum", "CumSum", "Hardmax", "ArgMax"],
)
def test_what_follows_an_op_whose_shape_follows_from_shapes_is_prepared(node, extra):
    """The ops of ir.SHAPE_FROM_SHAPES: an Add after them has a shape the input shapes decide,
    so a shape specialization prepares it (a transformer's Einsum kept everything after it a
    kernel)."""
    rng = np.random.default_rng(8)
    inits = []
    for name, shape in extra:
        inits.append(
            (name, np.array(1, np.int64) if shape is None else rng.standard_normal(shape).astype(np.float32))
        )
    nodes = [node]
    if node.op_type == "ArgMax":
        nodes.append(helper.make_node("Cast", ["i"], ["t"], to=F32))
    nodes.append(helper.make_node("Add", ["t", "t"], ["y"]))
    data = model_bytes(nodes, [("x", F32, ["n", "s", 8])], [("y", F32, None)], inits)
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    for _ in range(3):
        got = method.run({"x": x})["y"]
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=RTOL, atol=ATOL)
    assert "Add" in _prepared_ops(_plan(method, ((2, 5, 8),)).steps)


def test_shape_steps_inside_a_branch_keep_their_results_per_shape():
    """A Shape → Gather → Concat chain inside an If's branch (a Reshape's target) is computed
    from the input shapes alone: its steps keep their results past the If's jump, and runs at
    changing shapes and branches still match onnxruntime."""
    from offload.runtime.steps import _JumpStep, _ShapeStep

    def branch(name, factor):
        nodes = [
            helper.make_node("Shape", ["x"], [f"{name}_s"]),
            helper.make_node("Gather", [f"{name}_s", "zero"], [f"{name}_n"], axis=0),
            helper.make_node("Concat", [f"{name}_n", "minus_one"], [f"{name}_shape"], axis=0),
            helper.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_r"]),
            helper.make_node("Mul", [f"{name}_r", factor], [f"{name}_y"]),
        ]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", F32, None)])

    inits = [
        ("zero", np.array([0], np.int64)),
        ("minus_one", np.array([-1], np.int64)),
        ("two", np.array(2.0, np.float32)),
        ("three", np.array(3.0, np.float32)),
    ]
    nodes = [
        helper.make_node("Greater", ["k", "zero_f"], ["c"]),
        helper.make_node(
            "If", ["c"], ["y"], then_branch=branch("a", "two"), else_branch=branch("b", "three")
        ),
    ]
    inits.append(("zero_f", np.array(0.0, np.float32)))
    data = model_bytes(nodes, [("x", F32, ["n", "h", 4]), ("k", F32, [])], [("y", F32, None)], inits)
    method = _method(data)
    first_jump = next(pc for pc, s in enumerate(method._steps) if isinstance(s, _JumpStep))
    assert any(isinstance(s, _ShapeStep) for s in method._steps[first_jump:])
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(10)
    for n, h, k in [(2, 3, 1.0), (2, 3, 1.0), (2, 3, -1.0), (3, 5, -1.0), (3, 5, 1.0), (2, 3, 1.0)]:
        feeds = {"x": rng.standard_normal((n, h, 4)).astype(np.float32), "k": np.array(k, np.float32)}
        np.testing.assert_array_equal(method.run(feeds)["y"], session.run(None, feeds)[0])
