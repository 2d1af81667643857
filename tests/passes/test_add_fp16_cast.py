"""quantization::add_fp16_cast, and output_errors reporting its error per output."""

import numpy as np

import offload
from offload.passes.quantization.add_fp16_cast import output_errors

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["quantization::add_fp16_cast"]
I64 = np.int64


def _cnn():
    return model(
        [
            node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            node("Relu", ["c"], ["r"]),
            node("GlobalAveragePool", ["r"], ["g"]),
            node("Flatten", ["g"], ["f"]),
            node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
            node("Softmax", ["logits"], ["probs"]),
        ],
        {"x": (F32, [2, 3, 8, 8])},
        {"logits": (F32, None), "probs": (F32, None)},
        {
            "w": rand(4, 3, 3, 3, seed=1),
            "b": rand(4, seed=2),
            "fw": rand(5, 4, seed=3),
            "fb": rand(5, seed=4),
        },
    )


def test_inside_runs_in_fp16_the_interface_stays_fp32():
    feeds = {"x": rand(2, 3, 8, 8)}
    out = check(_cnn(), P, feeds, rtol=2e-2, atol=2e-2)  # float16 precision, against onnxruntime
    ops = out.main.body.operations
    # one cast in, one cast out per output; every compute op reads and writes float16
    assert op_types(out)["Cast"] == 3
    for op in ops:
        if op.op_type != "Cast":
            assert all(v.type.dtype.numpy == np.float16 for v in op.inputs if v is not None)
    assert [v.type.dtype.numpy for v in out.main.inputs + out.main.outputs] == [np.float32] * 3
    assert [v.name for v in out.main.outputs] == ["logits", "probs"]


def test_output_errors_are_reported_per_output():
    original, out = optimized(_cnn(), P)
    feeds = {"x": rand(2, 3, 8, 8)}
    errors = output_errors(original, out, feeds)
    assert set(errors) == {"logits", "probs"}
    want, got = offload.evaluate(original, feeds), offload.evaluate(out, feeds)
    for name, e in errors.items():
        worst = float(np.max(np.abs(got[name].astype(np.float64) - want[name])))
        assert e["max_abs"] == worst and 0 < worst < 2e-2
        assert e["max_rel"] == worst / float(np.max(np.abs(want[name])))


def test_ops_outside_the_table_and_integer_graphs_stay():
    data = model(
        [node("Resize", ["x", "", "sc"], ["y"], mode="nearest")],
        {"x": (F32, [1, 1, 2, 2])},
        {"y": (F32, None)},
        {"sc": np.array([1, 1, 2, 2], np.float32)},
    )
    _original, out = optimized(data, P)
    assert op_types(out) == {"Resize": 1}
    data = model([node("Add", ["i", "j"], ["y"])], {"i": (7, [3]), "j": (7, [3])}, {"y": (7, None)})
    _original, out = optimized(data, P)
    assert op_types(out) == {"Add": 1}
