"""preprocess::sanitize_input_output_names: identifier names, the same values (onnxruntime)."""

import numpy as np

import offload

from .helpers import F32, model, node, onnxruntime_run, optimized, rand

P = ["preprocess::sanitize_input_output_names"]


def test_names_become_identifiers_and_values_stay():
    data = model(
        [
            node("Relu", ["input:0"], ["1out"]),
            node("Neg", ["input:0"], ["out.put"]),
            node("Abs", ["x_ok"], ["out_put"]),
        ],
        {"input:0": (F32, [2, 3]), "x_ok": (F32, [2, 3])},
        {"1out": (F32, None), "out.put": (F32, None), "out_put": (F32, None)},
    )
    _, out = optimized(data, P)
    assert [v.name for v in out.main.inputs] == ["input_0", "x_ok"]
    assert [v.name for v in out.main.outputs] == ["_1out", "out_put_1", "out_put"]  # out_put was taken
    x, y = rand(2, 3, seed=1), rand(2, 3, seed=2)
    want = onnxruntime_run(data, {"input:0": x, "x_ok": y})
    got = offload.evaluate(out, {"input_0": x, "x_ok": y})
    for old, new in (("1out", "_1out"), ("out.put", "out_put_1"), ("out_put", "out_put")):
        np.testing.assert_array_equal(got[new], want[old])


def test_identifier_names_are_left_alone():
    data = model([node("Relu", ["x"], ["y"])], {"x": (F32, [2])}, {"y": (F32, None)})
    _original, out = optimized(data, P)
    assert [v.name for v in out.main.inputs + out.main.outputs] == ["x", "y"]
