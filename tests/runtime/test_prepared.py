"""Prepared calls (kernels.prepared): a .pte method runs elementwise ops straight into their arena
views, with the same bits as the kernels (offload.evaluate), and takes the kernel's way for an
input that is not a C-contiguous array of the declared type; runs of them whose inputs are certain
are bound to their arrays once and called back to back (runtime/bound_runs.py, _bind_runs)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.steps import _FusedAway, _KernelStep, _PreparedStep, _ShuffleSlices
from tests.reference import assert_close, onnxruntime_outputs, sum_tolerance

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    return offload.load(model_bytes(nodes, inputs, outputs, inits))


def _method(program):
    return offload.runtime.load(offload.save(program)).method("forward")


def _kinds(method) -> dict[str, str]:
    out = {}
    for step in method._steps:
        if isinstance(step, (_PreparedStep, _FusedAway, _ShuffleSlices)):  # fused: one call runs them
            out[step.kernel.op_name] = "prepared"
        elif isinstance(step, _KernelStep):
            out.setdefault(step.op_name, "kernel")
    return out


def test_elementwise_chain_is_prepared_and_bit_equal():
    """Bit for bit equal to offload.evaluate, and near onnxruntime: each of the 9 ops is within
    4 u of exact in both (onnxruntime's Sigmoid and Tanh are approximations within a few ulps),
    and the chain does not magnify an error (every op is at most 1-Lipschitz in x)."""
    rng = np.random.default_rng(0)
    data = model_bytes(
        [
            helper.make_node("Add", ["x", "c"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["s"]),
            helper.make_node("Mul", ["s", "x"], ["m"]),
            helper.make_node("Relu", ["m"], ["r"]),
            helper.make_node("Tanh", ["r"], ["t"]),
            helper.make_node("Max", ["t", "x"], ["mx"]),
            helper.make_node("Clip", ["mx", "lo", "hi"], ["cl"]),
            helper.make_node("Less", ["cl", "c"], ["lt"]),
            helper.make_node("Where", ["lt", "cl", "x"], ["y"]),
        ],
        [("x", F32, [3, 64])],
        [("y", F32, [3, 64])],
        [
            ("c", rng.standard_normal(64).astype(np.float32)),
            ("lo", np.array(-0.5, np.float32)),
            ("hi", np.array(0.75, np.float32)),
        ],
    )
    program = offload.load(data)
    method = _method(program)
    kinds = _kinds(method)
    for op in ("Add", "Sigmoid", "Mul", "Relu", "Tanh", "Max", "Clip", "Where"):
        assert kinds[f"onnx::{op}"] == "prepared", op
    for scale in (1.0, 30.0, 200.0):  # Sigmoid far out on both sides
        x = (rng.standard_normal((3, 64)) * scale).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])
        assert_close(got, onnxruntime_outputs(data, {"x": x})["y"], rtol=sum_tolerance(np.float32, 9 * 4))


def test_a_non_contiguous_input_takes_the_kernel(monkeypatch):
    """A float Transpose's result is a view of its input that the method does not copy into its
    arena: Add gets a non-C-contiguous array and runs its kernel, with the same result."""
    program = _model(
        [
            helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
            helper.make_node("Add", ["t", "t"], ["y"]),
        ],
        [("x", F32, [4, 6])],
        [("y", F32, [6, 4])],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Add"] == "prepared"
    took = []
    by_kernel = _PreparedStep._by_kernel
    monkeypatch.setattr(
        _PreparedStep,
        "_by_kernel",
        lambda step, frame, out: (took.append(step), by_kernel(step, frame, out))[1],
    )
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(method.run({"x": x})["y"], x.T + x.T)
    assert [step.kernel.op_name for step in took] == ["onnx::Add"]


@pytest.mark.parametrize(
    "dtype, onnx_type", [(np.float16, TensorProto.FLOAT16), (np.int64, TensorProto.INT64)]
)
def test_other_types(dtype, onnx_type):
    """float16 (computed widened) is not prepared; integers are, with the kernel's bits."""
    program = _model(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["a", "x"], ["y"])],
        [("x", onnx_type, [5])],
        [("y", onnx_type, [5])],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Add"] == ("kernel" if dtype == np.float16 else "prepared")
    x = np.arange(5).astype(dtype)
    got = method.run({"x": x})["y"]
    np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])
    # (x + x) * x of small integers is exact in both types: numpy's float64 result, cast
    np.testing.assert_array_equal(got, ((2 * x.astype(np.float64)) * x).astype(dtype))


def _chain(n: int):
    """x → n ops of (Add c, Relu, Mul c, Sigmoid, Tanh) over 16 floats, and its float64 reference."""
    c = np.linspace(-0.75, 0.5, 16).astype(np.float32)
    ops = ["Add", "Relu", "Mul", "Sigmoid", "Tanh"]
    nodes, prev = [], "x"
    for i in range(n):
        op = ops[i % len(ops)]
        nodes.append(helper.make_node(op, [prev, "c"] if op in ("Add", "Mul") else [prev], [f"v{i}"]))
        prev = f"v{i}"
    program = _model(nodes, [("x", F32, [16])], [(prev, F32, [16])], [("c", c)])

    apply = {
        "Add": lambda v, c: v + c,
        "Relu": lambda v, c: np.maximum(v, 0),
        "Mul": lambda v, c: v * c,
        "Sigmoid": lambda v, c: 1 / (1 + np.exp(-v)),
        "Tanh": lambda v, c: np.tanh(v),
    }

    def reference(x):
        v, c64 = x.astype(np.float64), c.astype(np.float64)
        for i in range(n):
            v = apply[ops[i % len(ops)]](v, c64)
        return v

    return program, prev, reference


def test_a_chain_after_its_input_runs_as_one_bound_run():
    """The small static input has a place of its own that each run copies it into, so every op,
    the first included, has certain inputs: one bound run of n calls (less the Relus that run
    as their Add's epilogue), equal to a float64 reference and to offload.evaluate."""
    from offload.runtime.steps import _FusedAway

    program, out, reference = _chain(200)
    method = _method(program)
    fused = sum(isinstance(s, _FusedAway) for s in method._steps)
    assert [len(run) for run in method._bound_runs] == [200 - fused]
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = (rng.standard_normal(16) * 3).astype(np.float32)
        got = method.run({"x": x})[out]
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})[out])


def test_bound_runs_of_concurrent_runs_use_their_own_arenas():
    """A run that finds the arena set taken gets a new set with its own bound calls."""
    from concurrent.futures import ThreadPoolExecutor

    program, out, _ = _chain(60)
    method = _method(program)
    xs = [np.full(16, k / 4 - 1, np.float32) for k in range(8)]
    expected = [method.run({"x": x})[out] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda x: method.run({"x": x})[out], xs))
            for g, e in zip(got, expected):
                np.testing.assert_array_equal(g, e)
    assert len(method._pool) >= 1


def test_a_failure_in_a_bound_run_names_its_op(monkeypatch):
    """The call that raised is found from where the run stopped: the error names that op."""
    from offload.errors import KernelError
    from offload.runtime import kernels

    from offload.runtime.kernels.elementwise import Float32PassCall

    real = kernels.bind

    def bind(call, out, args):
        if isinstance(call, Float32PassCall) and call.loop == "tanh32":

            def fail():
                raise FloatingPointError("injected")

            return fail
        return real(call, out, args)

    monkeypatch.setattr(kernels, "bind", bind)
    program, _, _ = _chain(7)  # Add, Relu, Mul, Sigmoid, Tanh (v4), Add, Relu
    method = _method(program)
    with pytest.raises(
        KernelError, match=r"\(onnx::Tanh\) failed on inputs \(float32\[16\]\): FloatingPointError"
    ):
        method.run({"x": np.ones(16, np.float32)})


def test_sigmoid_far_out_and_at_the_limits():
    """Sigmoid (prepared and bound) against float64 over its whole float32 range: no overflow
    warning where exp(-x) is inf, 0 and 1 at the infinities, nan for nan."""
    import warnings

    program = _model(  # x + 0 keeps x (inf, nan too) and makes Sigmoid's input certain: bound
        [helper.make_node("Add", ["x", "zero"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"])],
        [("x", F32, [12])],
        [("s", F32, [12])],
        [("zero", np.zeros(12, np.float32))],
    )
    method = _method(program)
    # (the input has a place of its own: the Add is bound too)
    assert [[s.kernel.op_name for s in run] for run in method._bound_runs] == [["onnx::Add", "onnx::Sigmoid"]]
    x = np.array([-np.inf, -3e38, -104, -88.5, -20, -1e-3, 0, 1e-3, 20, 104, np.inf, np.nan], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = method.run({"x": x})["s"]
        kernel = offload.evaluate(program, {"x": x})["s"]
    with np.errstate(over="ignore"):
        expected = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got[:-1], expected[:-1].astype(np.float32), rtol=2e-7, atol=1e-45)
    assert got[0] == 0 and got[-2] == 1 and np.isnan(got[-1])
    np.testing.assert_array_equal(got, kernel)


def test_relu_and_clip_with_full_operands_equal_numpy():
    """Relu and Clip's scalar bounds run against full read-only operands (``filled``, numpy's
    fast loop): the same values as numpy's maximum / minimum with scalars, nan and inf included."""
    from offload.runtime.kernels._util import FILLED_LIMIT, filled

    program = _model(
        [
            helper.make_node("Add", ["x", "zero"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Clip", ["a", "lo", "hi"], ["c"]),
            helper.make_node("Add", ["r", "c"], ["y"]),
        ],
        [("x", F32, [2, 8, 33, 31])],
        [("y", F32, [2, 8, 33, 31])],
        [
            ("zero", np.zeros((2, 8, 33, 31), np.float32)),
            ("lo", np.array(-0.5, np.float32)),
            ("hi", np.array(6, np.float32)),
        ],
    )
    method = _method(program)
    # (the input, 65472 bytes, has a place of its own: the first Add is bound too)
    assert [[s.kernel.op_name for s in run] for run in method._bound_runs] == [
        ["onnx::Add", "onnx::Relu", "onnx::Clip", "onnx::Add"]
    ]
    x = (np.random.default_rng(2).standard_normal((2, 8, 33, 31)) * 8).astype(np.float32)
    x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
    expected = np.maximum(x, np.float32(0)) + np.minimum(np.maximum(x, np.float32(-0.5)), np.float32(6))
    np.testing.assert_array_equal(method.run({"x": x})["y"], expected)
    np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], expected)
    six = filled(6, np.float32, (3, 5))
    assert six.shape == (3, 5) and not six.flags.writeable and (six == 6).all()
    assert filled(0, np.int64, (FILLED_LIMIT + 1,)).ndim == 0  # past the limit: the scalar


def test_a_channel_shuffle_is_prepared_and_equals_numpy():
    """ShuffleNet's channel shuffle (Concat, Reshape, Transpose, Reshape, two Slices) and the
    other reshapes: Concat and the reshapes prepared, each a view or one copy into its arena view
    (a reshape written over its input: no copy; the shuffle's four ops and the two Slices one
    fused call, runtime/fusions.py ``_fuse_channel_shuffles``), with numpy's values."""
    i64 = np.int64
    program = _model(
        [
            helper.make_node("Concat", ["x", "z"], ["c"], axis=1),
            helper.make_node("Reshape", ["c", "s5"], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", ["t", "s4"], ["u"]),
            helper.make_node("Slice", ["u", "lo", "mid", "ax"], ["a"]),
            helper.make_node("Slice", ["u", "mid", "hi", "ax"], ["b"]),
            helper.make_node("Unsqueeze", ["a", "ax"], ["a1"]),
            helper.make_node("Squeeze", ["a1", "ax"], ["a2"]),
            helper.make_node("Flatten", ["b"], ["y2"], axis=2),
            helper.make_node("Relu", ["a2"], ["y1"]),
        ],
        [("x", F32, [1, 24, 16, 16]), ("z", F32, [1, 24, 16, 16])],
        [("y1", F32, [1, 24, 16, 16]), ("y2", F32, [24, 256])],
        [
            ("s5", np.array([1, 2, 24, 16, 16], i64)),
            ("s4", np.array([1, -1, 16, 16], i64)),
            ("lo", np.array([0], i64)),
            ("mid", np.array([24], i64)),
            ("hi", np.array([48], i64)),
            ("ax", np.array([1], i64)),
        ],
    )
    method = _method(program)
    kinds = _kinds(method)
    for op in ("Concat", "Reshape", "Unsqueeze", "Squeeze", "Flatten"):
        assert kinds[f"onnx::{op}"] == "prepared", op
    rng = np.random.default_rng(3)
    for _ in range(2):  # the second run through the arena the first one left
        x, z = (rng.standard_normal((1, 24, 16, 16)).astype(np.float32) for _ in range(2))
        u = (
            np.concatenate([x, z], 1)
            .reshape(1, 2, 24, 16, 16)
            .transpose(0, 2, 1, 3, 4)
            .reshape(1, 48, 16, 16)
        )
        got = method.run({"x": x, "z": z})
        np.testing.assert_array_equal(got["y1"], np.maximum(u[:, :24], 0))
        np.testing.assert_array_equal(got["y2"], u[:, 24:].reshape(24, 256))


def test_a_reshape_of_a_transposed_view_copies_it_once_into_its_arena_view():
    """Transpose on a non-contiguous input takes its kernel, which returns a view; the Reshape
    after it copies that view straight into its planned output, in the view's row-major order."""
    program = _model(
        [
            helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
            helper.make_node("Transpose", ["a"], ["t"], perm=[1, 0]),
            helper.make_node("Reshape", ["t", "s"], ["y"]),
        ],
        [("x", F32, [64, 128])],
        [("y", F32, [32, 128])],
        [("s", np.array([32, -1], np.int64))],
    )
    method = _method(program)
    x = np.random.default_rng(4).standard_normal((64, 128)).astype(np.float32)
    y = method.run({"x": x})["y"]
    np.testing.assert_array_equal(y, x[:, :64].T.reshape(32, 128))


@pytest.mark.parametrize(
    "a_shape, b_shape, prepared",
    [
        ((16, 32), (32, 8), True),
        ((1, 32), (32, 8), True),
        ((16, 1, 48), (48, 5), True),  # the exported recurrent nets' heads: one product of 16 rows
        ((2, 3, 7, 32), (32, 8), True),
        ((2, 3, 16, 32), (2, 3, 32, 8), True),
        ((16, 32), (2, 32, 8), True),
        ((2, 3, 1, 32), (2, 3, 32, 8), False),  # one row: numpy's gemv (runtime/kernels/matmul_stacks.py)
    ],
)
def test_matmul_of_matrices_is_prepared_with_the_kernels_bits(a_shape, b_shape, prepared):
    """MatMul of a matrix or a stack by a matrix (by a stack's rows) or by a stack: a prepared
    call (a product of two stacks with one row or column: the kernel), bit for bit what the
    kernel gives (offload.evaluate) and within float32 of numpy in float64."""
    rng = np.random.default_rng(6)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out_shape = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    program = _model(
        [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        [("a", F32, list(a_shape))],
        [("y", F32, list(out_shape))],
        [("b", b)],
    )
    method = _method(program)
    assert _kinds(method)["onnx::MatMul"] == ("prepared" if prepared else "kernel")
    for _ in range(2):
        a = rng.standard_normal(a_shape).astype(np.float32)
        got = method.run({"a": a})["y"]
        np.testing.assert_array_equal(got, offload.evaluate(program, {"a": a})["y"])
        want = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)), 0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_identity_same_type_cast_and_float_pow_are_prepared():
    """Identity and a Cast to the input's type return the input, Pow of floats is one ufunc:
    prepared calls with numpy's values (Silero VAD's magnitude spectrum runs Cast, Pow, Pow)."""
    data = model_bytes(
        [
            helper.make_node("Identity", ["x"], ["i"]),
            helper.make_node("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
            helper.make_node("Pow", ["c", "two"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, [3, 65])],
        [("y", TensorProto.FLOAT, None)],
        [("two", np.array(2.0, np.float32))],
    )
    method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
    ops = sorted(s.kernel.op_name for s in method._steps if isinstance(s, _PreparedStep))
    assert ops == ["onnx::Cast", "onnx::Identity", "onnx::Pow"]
    x = np.random.default_rng(9).standard_normal((3, 65)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(method.run({"x": x})["y"], np.power(x, np.float32(2.0)))


@pytest.mark.parametrize("sizes", [[3, 5], None], ids=["sizes", "equal-chunks"])
def test_split_pieces_are_copied_into_their_views(sizes):
    """Split as a prepared call of several outputs: each piece numpy's, through the bound Adds
    after it."""
    from offload.runtime.steps import _PreparedOutputsStep

    inputs = ["x", "sizes"] if sizes is not None else ["x"]
    attrs = {} if sizes is not None else {"num_outputs": 2}
    nodes = [
        helper.make_node("Split", inputs, ["a", "b"], axis=-1, **attrs),
        helper.make_node("Add", ["a", "a"], ["ya"]),
        helper.make_node("Add", ["b", "b"], ["yb"]),
    ]
    inits = [("sizes", np.array(sizes, np.int64))] if sizes is not None else []
    method = _method(_model(nodes, [("x", F32, [4, 8])], [("ya", F32, None), ("yb", F32, None)], inits))
    assert any(
        isinstance(s, _PreparedOutputsStep) and s.kernel.op_name == "onnx::Split" for s in method._steps
    )
    x = np.random.default_rng(13).standard_normal((4, 8)).astype(np.float32)
    a, b = np.split(x, [3 if sizes is not None else 4], axis=-1)
    for _ in range(2):
        got = method.run({"x": x})
        np.testing.assert_array_equal(got["ya"], a + a)
        np.testing.assert_array_equal(got["yb"], b + b)


@pytest.mark.parametrize(
    "shape, indices, axis",
    [((2, 1, 128), np.array(1, np.int64), 0), ((2, 3, 4), np.array([[-1, 0], [2, 1]], np.int32), 2)],
    ids=["state-row", "negative-2d"],
)
def test_gather_by_constant_indices_is_prepared(shape, indices, axis):
    """Gather as np.take into its view: numpy's elements (negative indices from the end)."""
    program = _model(
        [helper.make_node("Gather", ["x", "i"], ["t"], axis=axis), helper.make_node("Neg", ["t"], ["y"])],
        [("x", F32, list(shape))],
        [("y", F32, None)],
        [("i", indices)],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Gather"] == "prepared"
    x = np.random.default_rng(14).standard_normal(shape).astype(np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(method.run({"x": x})["y"], -np.take(x, indices, axis=axis))


def test_a_gather_index_out_of_range_is_the_kernels_error():
    from offload.errors import KernelError

    program = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        [("x", F32, [3, 2])],
        [("y", F32, None)],
        [("i", np.array([3], np.int64))],
    )
    with pytest.raises(KernelError, match="Gather"):
        _method(program).run({"x": np.zeros((3, 2), np.float32)})


@pytest.mark.parametrize("index", [1, -1, -3, 2])
def test_gather_by_computed_indices_counts_negative_ones_from_the_end(index):
    """Indices a run computes (a constant plus an input) go to numpy's take as they are at every
    run: a negative index counts from the end, as ONNX says; the result against numpy's indexing
    of the wrapped index."""
    program = _model(
        [
            helper.make_node("Add", ["i", "zero"], ["j"]),
            helper.make_node("Gather", ["x", "j"], ["t"], axis=1),
            helper.make_node("Neg", ["t"], ["y"]),
        ],
        [("x", F32, [2, 3, 4]), ("zero", TensorProto.INT64, [1])],
        [("y", F32, None)],
        [("i", np.array([index], np.int64))],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Gather"] == "prepared"
    x = np.random.default_rng(15).standard_normal((2, 3, 4)).astype(np.float32)
    zero = np.zeros(1, np.int64)
    for _ in range(2):
        want = -x[:, [index % 3], :]
        np.testing.assert_array_equal(method.run({"x": x, "zero": zero})["y"], want)


def test_a_computed_gather_index_out_of_range_is_the_kernels_error():
    from offload.errors import KernelError

    program = _model(
        [
            helper.make_node("Add", ["i", "zero"], ["j"]),
            helper.make_node("Gather", ["x", "j"], ["y"], axis=0),
        ],
        [("x", F32, [3, 2]), ("zero", TensorProto.INT64, [1])],
        [("y", F32, None)],
        [("i", np.array([3], np.int64))],
    )
    method = _method(program)
    assert _kinds(method)["onnx::Gather"] == "prepared"
    with pytest.raises(KernelError, match="Gather"):
        method.run({"x": np.zeros((3, 2), np.float32), "zero": np.zeros(1, np.int64)})
