"""cleanup::remove_symbolic_reshape."""

import numpy as np

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["cleanup::remove_symbolic_reshape"]
I64 = np.int64


def _model(batch_dims):
    return model(
        [
            node("Shape", ["x"], ["s"]),
            node("Gather", ["s", "zero"], ["n"], axis=0),
            node("Unsqueeze", ["n", "zero1"], ["n1"]),
            node("Concat", ["n1", "four"], ["target"], axis=0),
            node("Reshape", ["x", "target"], ["y"]),
        ],
        {"x": (F32, [*batch_dims, 2, 2])},
        {"y": (F32, None)},
        {"zero": np.array(0, I64), "zero1": np.array([0], I64), "four": np.array([4], I64)},
    )


def test_symbolic_batch_reshape_reads_a_constant_shape():
    data = _model(["N"])
    out = check(data, P, {"x": rand(3, 2, 2)})
    assert op_types(out) == {"Reshape": 1}
    assert out.main.body.operations[0].inputs[1].const_value.tolist() == [-1, 4]
    np.testing.assert_equal(out.main.outputs[0].type.shape, ("N", 4))


def test_two_unknown_dims_stay():
    data = model(
        [node("Shape", ["x"], ["s"]), node("Reshape", ["x", "s"], ["y"])],
        {"x": (F32, ["N", "M"])},
        {"y": (F32, None)},
    )
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
