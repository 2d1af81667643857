"""optimize_repeat_ops::unit_axis_moves: Transpose / Squeeze / Unsqueeze chains that only move
axes of size 1 become a Squeeze and an Unsqueeze, checked against onnxruntime on the original
model and bit for bit against the program before the pass."""

import numpy as np
import pytest
from onnx import TensorProto

import offload

from .helpers import F32, model, node, op_types, optimized, rand
from .helpers import check as check_against_onnxruntime

P = ["optimize_repeat_ops::unit_axis_moves"]


def check(data: bytes, feeds: dict):
    out = check_against_onnxruntime(data, P, feeds)
    before, after = offload.evaluate(offload.load(data), feeds), offload.evaluate(out, feeds)
    for name, want in before.items():
        np.testing.assert_array_equal(after[name], want, err_msg=name)
    return out


def _chain(steps, shape):
    """x → the steps ((op, perm or axes), ...) → Relu → y."""
    nodes, inits, cur = [], {}, "x"
    for i, (kind, arg) in enumerate(steps):
        if kind == "Transpose":
            nodes.append(node("Transpose", [cur], [f"v{i}"], perm=arg))
        else:
            inits[f"a{i}"] = np.array(arg, np.int64)
            nodes.append(node(kind, [cur, f"a{i}"], [f"v{i}"]))
        cur = f"v{i}"
    nodes.append(node("Relu", [cur], ["y"]))
    return model(nodes, {"x": (F32, list(shape))}, {"y": (F32, None)}, inits)


def test_spectrogram_frames_chain_is_a_squeeze_and_an_unsqueeze():
    steps = [("Transpose", [0, 2, 3, 1]), ("Squeeze", [1]), ("Transpose", [0, 2, 1]), ("Unsqueeze", [1])]
    out = check(_chain(steps, (2, 9, 1, 5)), {"x": rand(2, 9, 1, 5, seed=1)})
    assert op_types(out) == {"Squeeze": 1, "Unsqueeze": 1, "Relu": 1}


def test_transposes_of_new_axes_are_one_unsqueeze():
    # (3, 7) → (3, 1, 7) → (3, 7, 1) → (3, 1, 7, 1) → (3, 1, 1, 7)
    steps = [("Unsqueeze", [1]), ("Transpose", [0, 2, 1]), ("Unsqueeze", [1]), ("Transpose", [0, 1, 3, 2])]
    out = check(_chain(steps, (3, 7)), {"x": rand(3, 7, seed=2)})
    assert op_types(out) == {"Unsqueeze": 1, "Relu": 1}


@pytest.mark.parametrize(
    "steps, shape",
    [
        ([("Transpose", [0, 2, 1])], (2, 3, 4)),  # a real transpose
        ([("Transpose", [0, 2, 3, 1]), ("Squeeze", [1])], (2, 9, 1, 5)),  # 9 and 5 change places
    ],
    ids=["transpose", "moves-two-long-axes"],
)
def test_chains_that_move_data_stay(steps, shape):
    out = check(_chain(steps, shape), {"x": rand(*shape, seed=3)})
    assert op_types(out)["Transpose"] == 1


def test_computed_axes_stay():
    nodes = [
        node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        node("Add", ["a0", "zero"], ["a"]),
        node("Squeeze", ["t", "a"], ["s"]),
        node("Transpose", ["s"], ["y"], perm=[0, 2, 1]),
    ]
    inputs = {"x": (F32, [2, 9, 1, 5]), "a0": (TensorProto.INT64, [1])}
    data = model(nodes, inputs, {"y": (F32, None)}, {"zero": np.zeros(1, np.int64)})
    _, out = optimized(data, P)
    assert op_types(out)["Transpose"] == 2
