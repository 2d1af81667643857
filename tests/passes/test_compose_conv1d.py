"""optimize_conv::compose_conv1d."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_conv::compose_conv1d"]
I64 = np.int64
X = {"x": rand(2, 3, 10, seed=4)}


def _conv1d_as_2d(axis=2, squeeze_axis=None, w_shape=(8, 3, 1, 3), conv_attrs=None, other_reader=False):
    conv_attrs = conv_attrs or {}
    nodes = [
        node("Unsqueeze", ["x", "ua"], ["u"]),
        node("Conv", ["u", "w", "b"], ["c"], **conv_attrs),
        node("Squeeze", ["c", "sa"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Relu", ["c"], ["z"]))
        outputs["z"] = (F32, None)
    inits = {
        "ua": np.array([axis], I64),
        "sa": np.array([axis if squeeze_axis is None else squeeze_axis], I64),
        "w": rand(*w_shape, seed=5),
        "b": rand(w_shape[0], seed=6),
    }
    return model(nodes, {"x": (F32, [2, 3, 10])}, outputs, inits)


@pytest.mark.parametrize(
    "axis, w_shape, attrs",
    [
        (2, (8, 3, 1, 3), {"pads": [0, 1, 0, 1], "strides": [1, 2]}),
        (-2, (8, 3, 1, 3), {"dilations": [3, 2], "kernel_shape": [1, 3]}),
        (3, (6, 1, 5, 1), {"group": 3, "pads": [2, 0, 1, 0]}),
        (-1, (8, 3, 3, 1), {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    ],
)
def test_unsqueeze_conv_squeeze_is_a_conv1d(axis, w_shape, attrs):
    out = check(_conv1d_as_2d(axis, w_shape=w_shape, conv_attrs=attrs), P, X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Conv": 1}
    (conv,) = out.main.body.operations
    assert conv.inputs[1].type.rank == 3 and conv.inputs[0].name == "x"


def test_padded_row_or_other_reader_stay():
    # With a padded row the one output row reads the padding: the Conv1D would read x instead.
    padded = _conv1d_as_2d(conv_attrs={"pads": [1, 0, 1, 0], "strides": [3, 1]})
    out = check(padded, P, X)
    assert op_types(out) == {"Unsqueeze": 1, "Conv": 1, "Squeeze": 1}
    _original, out = optimized(_conv1d_as_2d(other_reader=True), P)
    assert op_types(out) == {"Unsqueeze": 1, "Conv": 1, "Squeeze": 1, "Relu": 1}


def test_a_weight_computed_at_run_time_stays():
    nodes = [
        node("Unsqueeze", ["x", "ua"], ["u"]),
        node("Conv", ["u", "w"], ["c"]),
        node("Squeeze", ["c", "ua"], ["y"]),
    ]
    data = model(
        nodes,
        {"x": (F32, [2, 3, 10]), "w": (F32, [8, 3, 1, 3])},
        {"y": (F32, None)},
        {"ua": np.array([2], I64)},
    )
    _original, out = optimized(data, P)
    assert op_types(out) == {"Unsqueeze": 1, "Conv": 1, "Squeeze": 1}
