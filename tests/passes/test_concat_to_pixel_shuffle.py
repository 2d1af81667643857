"""optimize_tensor_operation::concat_to_pixel_shuffle, against onnxruntime on the original model."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

P = ["optimize_tensor_operation::concat_to_pixel_shuffle"]
SHAPE = [1, 2, 3, 4]


def _interleave(a: str, b: str, axis: int, out: str, shape: list[int]) -> tuple[list, list[int]]:
    """Nodes interleaving a and b on ``axis`` (Unsqueeze at axis+1, Concat, Reshape merging)."""
    merged = list(shape)
    merged[axis] *= 2
    nodes = [
        node("Unsqueeze", [a, f"{out}_axes"], [f"{out}_ua"]),
        node("Unsqueeze", [b, f"{out}_axes"], [f"{out}_ub"]),
        node("Concat", [f"{out}_ua", f"{out}_ub"], [f"{out}_c"], axis=axis + 1),
        node("Reshape", [f"{out}_c", f"{out}_shape"], [out]),
    ]
    return nodes, merged


def _model(inner_axis: int, outer_axis: int, extra_output: bool = False):
    na, sa = _interleave("x1", "x2", inner_axis, "a", SHAPE)
    nb, _ = _interleave("x3", "x4", inner_axis, "b", SHAPE)
    ny, sy = _interleave("a", "b", outer_axis, "y", sa)
    inits = {
        "a_axes": np.array([inner_axis + 1], np.int64),
        "b_axes": np.array([inner_axis + 1], np.int64),
        "y_axes": np.array([outer_axis + 1], np.int64),
        "a_shape": np.array(sa, np.int64),
        "b_shape": np.array(sa, np.int64),
        "y_shape": np.array(sy, np.int64),
    }
    outputs = {"y": (F32, None), **({"a": (F32, None)} if extra_output else {})}
    return model(na + nb + ny, {f"x{i}": (F32, SHAPE) for i in range(1, 5)}, outputs, inits)


def _feeds():
    return {f"x{i}": rand(*SHAPE, seed=i) for i in range(1, 5)}


@pytest.mark.parametrize("inner, outer", [(2, 3), (3, 2)])
def test_interleaves_on_h_and_w_are_a_depth_to_space(inner, outer):
    out = check(_model(inner, outer), P, _feeds(), rtol=0, atol=0)  # data movement: exact
    assert op_types(out) == {"Concat": 1, "DepthToSpace": 1}
    (d2s,) = [op for op in out.main.body.operations if op.op_type == "DepthToSpace"]
    assert d2s.attributes["blocksize"] == 2 and d2s.attributes["mode"] == "DCR"


def test_both_levels_on_one_axis_stay():
    _, out = optimized(_model(2, 2), P)
    assert "DepthToSpace" not in op_types(out)


def test_an_intermediate_read_elsewhere_stays():
    out = check(_model(2, 3, extra_output=True), P, _feeds(), rtol=0, atol=0)
    assert "DepthToSpace" not in op_types(out)
