"""Float Transposes prepared in a shape specialization (runtime/transpose_views.py): a copy read
by Reshapes, a strided view read by MatMuls (an attention block's heads), a kernel step where an
Add reads it; and LayerNormalization's and Softmax's bound calls. Values against onnxruntime, and bit for bit
what ``offload.evaluate`` gives."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels.layer_norm_prepared import _layer_norm_prepared, _normalize
from offload.runtime.kernels.normalization import layer_normalization, softmax
from offload.runtime.kernels.softmax_prepared import _softmax_into, _softmax_prepared
from offload.runtime.steps import _PreparedStep
from offload.runtime.transpose_views import _CalledPlain

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT


def _attention_heads() -> bytes:
    """x, v [n, 2, 8] (n symbolic), copied by Identities into arrays of their own (the caller's
    arrays may share memory): q = Transpose(x, (1, 0, 2)), k = Transpose(v, (1, 2, 0)),
    q @ k, its Softmax @ q (MatMuls reading strided views); Transpose(1, 0, 2) of that joined by a
    Reshape (a copy), v's (1, 2, 0) into a 1-D Conv (a copy), v's (0, 2, 1) into a MatMul and
    the residual Add of its product (a strided view; numpy adds it into a C-ordered result). A
    kernel step: a Transpose added to itself (numpy's sum of two strided views is strided)."""
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Identity", ["v"], ["vi"]),
        helper.make_node("Transpose", ["xi"], ["q"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["vi"], ["k"], perm=[1, 2, 0]),
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "q"], ["a"]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["b", "joined"], ["y"]),
        helper.make_node("Transpose", ["vi"], ["r"], perm=[1, 0, 2]),
        helper.make_node("Add", ["r", "r"], ["z"]),
        helper.make_node("Transpose", ["vi"], ["vt"], perm=[1, 2, 0]),
        helper.make_node("Conv", ["vt", "wc"], ["c"], pads=[1, 1]),
        helper.make_node("Transpose", ["vi"], ["h"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h", "wm"], ["hm"]),
        helper.make_node("Add", ["h", "hm"], ["res"]),
    ]
    joined = np.array([0, 16], np.int64)
    return model_bytes(
        nodes,
        [("x", F32, ["n", 2, 8]), ("v", F32, ["n", 2, 8])],
        [("y", F32, None), ("z", F32, None), ("c", F32, None), ("res", F32, None)],
        [
            ("joined", joined),
            ("wc", np.random.default_rng(5).standard_normal((4, 8, 3)).astype(np.float32)),
            ("wm", np.random.default_rng(7).standard_normal((2, 2)).astype(np.float32)),
        ],
    )


def test_transposes_of_an_attention_block_are_prepared_and_match():
    data = _attention_heads()
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for n in (9, 9, 9, 5, 5, 5):
        feeds = {name: rng.standard_normal((n, 2, 8)).astype(np.float32) for name in ("x", "v")}
        got = method.run(feeds)
        want = offload.evaluate(program, feeds)
        names = ("y", "z", "c", "res")
        for name in names:
            assert got[name].tobytes() == want[name].tobytes(), name
        for name, ref in zip(names, session.run(list(names), feeds)):
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5)
    for n in (9, 5):
        plan = method._specializations.entries[((n, 2, 8), (n, 2, 8))]
        calls = {}
        for step in plan.steps:
            op = getattr(step, "kernel", step).op_name
            calls.setdefault(op, []).append(type(step.call) if type(step) is _PreparedStep else type(step))
        # q, k and h as strided views, b and vt as copies; r (read by an Add of itself) a kernel step
        assert sorted(c.__name__ for c in calls["onnx::Transpose"]) == sorted(
            ["_CopyUntransposed"] * 3 + ["_CopyTransposed"] * 2 + ["_KernelStep"]
        )
        assert calls["onnx::MatMul"] == [_CalledPlain] * 3
        assert [c.__name__ for c in calls["onnx::Add"]] == ["_AddCall", "_AddCall"]  # bound as they are
        assert len(plan.strided) == 3
        planned = plan.pool[0][0]
        for slot, (shape, perm) in plan.strided.items():  # transposed as the kernel's view
            assert planned[slot].strides == np.empty(shape, np.float32).transpose(perm).strides


def test_layer_norm_bound_call_is_the_kernels_bits():
    rng = np.random.default_rng(4)
    for dtype, stash in ((np.float32, 1), (np.float64, 11)):
        for shape, axis in (((9, 16), -1), ((1, 5, 32), -1), ((2, 3, 7, 33), 2), ((3, 1000), 0)):
            x = (rng.standard_normal(shape) * 40 + 3).astype(dtype)
            scale, bias = (rng.standard_normal(shape[axis:]).astype(dtype) for _ in range(2))
            spec = [(np.dtype(dtype), shape), (np.dtype(dtype), scale.shape), (np.dtype(dtype), bias.shape)]
            attrs = {"axis": axis, "epsilon": 1e-5, "stash_type": stash}
            call = _layer_norm_prepared(attrs, spec, (np.dtype(dtype), shape))
            want = layer_normalization(None, x, scale, bias, **attrs)[0]
            out = np.empty(shape, dtype)
            bound = call.bind(out, x, scale, bias)
            assert bound.func is _normalize
            for _ in range(2):
                bound()
                assert out.tobytes() == want.tobytes()
            out[:] = 0
            call(out, x, scale, bias)
            assert out.tobytes() == want.tobytes()
            expect = x - x.mean(axis=tuple(range(axis % x.ndim, x.ndim)), keepdims=True, dtype=np.float64)
            var = (expect * expect).mean(axis=tuple(range(axis % x.ndim, x.ndim)), keepdims=True)
            ref = expect / np.sqrt(var + 1e-5) * scale + bias
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


class _NoPlace:
    """A kernel context without arena views: the kernel allocates its result, as evaluate's."""

    def out(self, i):
        return None


def test_softmax_bound_call_is_the_kernels_bits():
    rng = np.random.default_rng(6)
    for dtype in (np.float32, np.float64):
        for shape, axis in (((2, 9, 9), -1), ((3, 5, 7), 1), ((4, 300), 0)):
            x = (rng.standard_normal(shape) * 8).astype(dtype)
            call = _softmax_prepared({"axis": axis}, [(np.dtype(dtype), shape)], (np.dtype(dtype), shape))
            want = softmax(_NoPlace(), x, axis=axis)
            out = np.empty(shape, dtype)
            bound = call.bind(out, x)
            assert bound.func is _softmax_into
            for _ in range(2):
                bound()
                assert out.tobytes() == want.tobytes()
            wide = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
            np.testing.assert_allclose(out, wide / wide.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-7)
            strided = call.bind(out, x.T.copy().T) if x.ndim == 2 else None  # another layout: the call itself
            if strided is not None:
                assert strided.func is call


def test_transpose_into_an_lstm_is_a_copy():
    """u [2, n, 4] to X [n, 2, 4] of a plain LSTM: a copy (the LSTM copies X's values first)."""
    rng = np.random.default_rng(8)
    W, R = (rng.standard_normal((1, 12, k)).astype(np.float32) for k in (4, 3))
    data = model_bytes(
        [
            helper.make_node("Transpose", ["u"], ["x"], perm=[1, 0, 2]),
            helper.make_node("LSTM", ["x", "W", "R"], ["y", "yh"], hidden_size=3),
        ],
        [("u", F32, [2, "n", 4])],
        [("y", F32, None), ("yh", F32, None)],
        [("W", W), ("R", R)],
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for _ in range(3):
        feeds = {"u": rng.standard_normal((2, 6, 4)).astype(np.float32)}
        got = method.run(feeds)
        want = offload.evaluate(program, feeds)
        for name, ref in zip(("y", "yh"), session.run(["y", "yh"], feeds)):
            assert got[name].tobytes() == want[name].tobytes(), name
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6)
    plan = method._specializations.entries[((2, 6, 4),)]
    (step,) = [s for s in plan.steps if getattr(s, "kernel", s).op_name == "onnx::Transpose"]
    assert type(step) is _PreparedStep and type(step.call).__name__ == "_CopyTransposed"


def test_transposes_read_by_kernel_and_move_steps_stay_kernel_steps():
    """A Transpose whose reader has no prepared call (CumSum, a kernel step) or is a move (an
    Identity to an output) is left as it was: bits of ``evaluate``, values of onnxruntime."""
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"]),
        helper.make_node("Transpose", ["xi"], ["t"], perm=[1, 0, 2]),
        helper.make_node("CumSum", ["t", "axis"], ["c"]),
        helper.make_node("Transpose", ["xi"], ["u"], perm=[2, 1, 0]),
        helper.make_node("Identity", ["u"], ["m"]),
    ]
    data = model_bytes(
        nodes,
        [("x", F32, ["n", 2, 8])],
        [("c", F32, None), ("m", F32, None)],
        [("axis", np.array(0, np.int64))],
    )
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    for n in (3, 3, 3, 6, 6):
        feeds = {"x": rng.standard_normal((n, 2, 8)).astype(np.float32)}
        got, want = method.run(feeds), offload.evaluate(program, feeds)
        for name, ref in zip(("c", "m"), session.run(["c", "m"], feeds)):
            assert got[name].tobytes() == want[name].tobytes(), name
            np.testing.assert_allclose(got[name], ref, rtol=1e-6, atol=1e-6)
