"""quantization::fp16_compute_in_fp32: float16 chains compute in float32, rounding at their edges."""

import numpy as np
from onnx import TensorProto

from tests.delegates.opencl_support import needs_opencl

from .helpers import F32, model, node, op_types, optimized, rand

P = ["quantization::fp16_compute_in_fp32"]
F16 = TensorProto.FLOAT16


def _chain(interface=F16):
    """x (interface type) → Cast(fp16) → Mul · w → Add b → Relu → Sin (outside the table) → y."""
    return model(
        [
            node("Cast", ["x"], ["h"], to=F16),
            node("Mul", ["h", "w"], ["m"]),
            node("Add", ["m", "b"], ["a"]),
            node("Relu", ["a"], ["r"]),
            node("Sin", ["r"], ["y"]),
        ],
        {"x": (interface, [4, 5])},
        {"y": (F16, None), "r": (F16, None)},
        {"w": rand(5, seed=1).astype(np.float16), "b": rand(5, seed=2).astype(np.float16)},
    )


def _reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy: the chain in float32 from the float16 input, rounded to float16 once at its end."""
    w, b = rand(5, seed=1).astype(np.float16), rand(5, seed=2).astype(np.float16)
    r = np.maximum(x.astype(np.float16).astype(np.float32) * w.astype(np.float32) + b.astype(np.float32), 0)
    r16 = r.astype(np.float16)
    return r16, np.sin(r16)


def test_a_float16_chain_runs_in_float32_and_rounds_once():
    import offload

    _original, out = optimized(_chain(), P)
    types = op_types(out)
    assert types["Mul"] == 1 and types["Add"] == 1 and types["Relu"] == 1
    ops = {op.op_type: op for op in out.main.body.operations}
    for name in ("Mul", "Add", "Relu"):
        assert all(v.type.dtype.numpy == np.float32 for v in (*ops[name].inputs, ops[name].outputs[0]))
    assert ops["Sin"].inputs[0].type.dtype.numpy == np.float16  # Sin is outside the table
    assert [v.type.dtype.numpy for v in out.main.inputs + out.main.outputs] == [np.float16] * 3
    assert [v.name for v in out.main.outputs] == ["y", "r"]
    x = rand(4, 5, seed=3).astype(np.float16)
    got = offload.evaluate(out, {"x": x})
    r, y = _reference(x)
    np.testing.assert_array_equal(got["r"], r)  # one rounding, after Relu
    np.testing.assert_allclose(got["y"].astype(np.float32), y.astype(np.float32), atol=1e-3)


def test_a_float32_interface_loses_its_cast_pair():
    """Cast(fp32 → fp16) feeding a float32 chain: the pair fp32 → fp16 → fp32 goes, so the input's
    float32 values reach Mul unrounded."""
    import offload

    _original, out = optimized(_chain(F32), P)
    mul = next(op for op in out.main.body.operations if op.op_type == "Mul")
    assert mul.inputs[0] is out.main.inputs[0] or mul.inputs[1] is out.main.inputs[0]
    x = rand(4, 5, seed=4)
    got = offload.evaluate(out, {"x": x})
    w, b = rand(5, seed=1).astype(np.float16), rand(5, seed=2).astype(np.float16)
    want = np.maximum(x * w.astype(np.float32) + b.astype(np.float32), 0).astype(np.float16)
    np.testing.assert_array_equal(got["r"], want)


def test_float32_and_mixed_ops_stay():
    data = model(
        [node("Add", ["x", "y"], ["z"]), node("Cast", ["z"], ["h"], to=F16), node("Relu", ["h"], ["r"])],
        {"x": (F32, [3]), "y": (F32, [3])},
        {"r": (F16, None)},
    )
    _original, out = optimized(data, P)
    add = next(op for op in out.main.body.operations if op.op_type == "Add")
    assert add.outputs[0].type.dtype.numpy == np.float32
    assert op_types(out)["Relu"] == 1


def _tests_and_casts():
    """A float16 graph of comparisons, Casts to and from float16 and an ArgMax, as Core ML ML
    programs write thresholds: m = x·x; k = m >= x; s = Cast(k, fp16) + m; i = Cast(s, int32);
    a = ArgMax(s)."""
    return model(
        [
            node("Mul", ["x", "x"], ["m"]),
            node("GreaterOrEqual", ["m", "x"], ["k"]),
            node("Cast", ["k"], ["c"], to=F16),
            node("Add", ["c", "m"], ["s"]),
            node("Cast", ["s"], ["i"], to=TensorProto.INT32),
            node("ArgMax", ["s"], ["a"], axis=1),
        ],
        {"x": (F16, [4, 6])},
        {
            "s": (F16, None),
            "k": (TensorProto.BOOL, None),
            "i": (TensorProto.INT32, None),
            "a": (TensorProto.INT64, None),
        },
    )


def _tests_and_casts_reference(x: np.ndarray) -> dict:
    """numpy: the graph in float32 from the float16 input (the comparison sees x·x before any
    rounding to float16), s rounded to float16 once at the interface."""
    x32 = x.astype(np.float32)
    m = x32 * x32
    k = m >= x32
    s = k.astype(np.float32) + m
    return {
        "k": k,
        "s": s.astype(np.float16),
        "i": s.astype(np.int32),
        "a": np.argmax(s, axis=1, keepdims=True),
    }


def test_comparisons_and_casts_of_float16_read_float32():
    """Every op of the graph reads and writes float32 or no float; float16 remains only in the
    Casts at the interface."""
    import offload

    _original, out = optimized(_tests_and_casts(), P)
    for op in out.main.body.operations:
        if op.op_type != "Cast":
            assert all(v.type.dtype.numpy != np.float16 for v in (*op.inputs, *op.outputs)), op.op_type
    x = (rand(4, 6, seed=5) * 2).astype(np.float16)
    got = offload.evaluate(out, {"x": x})
    for name, want in _tests_and_casts_reference(x).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)


@needs_opencl
def test_a_float16_graph_of_tests_and_casts_is_delegated_but_its_interface():
    """On opencl the whole float16 graph is one delegate: only the Casts between the float16
    interface and float32 stay on the CPU."""
    import offload
    import offload.runtime

    lowered = offload.to_backend(offload.load(_tests_and_casts()), "opencl")
    ops = [op.qualified_type for op in lowered.main.body.operations]
    assert ops == ["Cast", "offload::Delegate", "Cast"], ops
    x = (rand(4, 6, seed=6) * 2).astype(np.float16)
    got = offload.runtime.load(offload.save(lowered)).run({"x": x})
    for name, want in _tests_and_casts_reference(x).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
