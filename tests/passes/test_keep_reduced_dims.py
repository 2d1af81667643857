"""optimize_repeat_ops::keep_reduced_dims: a keepdims=0 reduction reshaped back to the kept-dims
shape becomes the keepdims=1 reduction; checked against onnxruntime on the original model."""

import numpy as np
import pytest

import offload
from offload.passes.pipeline import DEFAULT

from .helpers import F32, model, node, op_types, optimized, rand
from .helpers import check as check_against_onnxruntime

P = ["optimize_repeat_ops::keep_reduced_dims", "cleanup::dead_code_elimination"]
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
I64 = 7


def _squeeze_excitation(restore: list, opset: int = 21) -> bytes:
    """A Keras squeeze-and-excitation block as a TFLite file gives it at a symbolic batch: MEAN
    over H and W dropping them, the [N, 1, 1, C] shape built from the mean's own Shape, RESHAPE,
    a 1x1 Conv, Sigmoid, Mul with the block's input. ``restore`` turns %m into %r."""
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("ReduceMean", ["a", "axes"], ["m"], keepdims=0),
        *restore,
        node("Transpose", ["r"], ["rt"], perm=TO_NCHW),
        node("Conv", ["rt", "w"], ["e"]),
        node("Sigmoid", ["e"], ["g"]),
        node("Mul", ["x", "g"], ["y"]),
    ]
    inits = {
        "axes": np.array([1, 2], np.int64),
        "w": rand(4, 4, 1, 1, seed=3),
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "ones": np.array([1, 1], np.int64),
        "channels": np.array([4], np.int64),
        "bad": np.array([1, 4, 1], np.int64),
    }
    return model(nodes, {"x": (F32, ["N", 4, 6, 5])}, {"y": (F32, None)}, inits, opset=opset)


FROM_SHAPE = [
    node("Shape", ["m"], ["s"]),
    node("Slice", ["s", "zero", "one"], ["n"]),
    node("Concat", ["n", "ones", "channels"], ["target"], axis=0),
    node("Reshape", ["m", "target"], ["r"]),
]
X = {"x": rand(2, 4, 6, 5, seed=1)}


@pytest.mark.parametrize(
    "restore",
    [FROM_SHAPE, [node("Unsqueeze", ["m", "axes"], ["r"])]],
    ids=["reshape-from-shape", "unsqueeze"],
)
def test_reduction_reshaped_back_keeps_its_dims(restore):
    out = check_against_onnxruntime(_squeeze_excitation(restore), P, X)
    types = op_types(out)
    assert types["ReduceMean"] == 1 and types["Reshape"] == types["Unsqueeze"] == types["Shape"] == 0
    (mean,) = [op for op in out.main.body.walk() if op.op_type == "ReduceMean"]
    assert mean.attributes["keepdims"] == 1
    # the same values as before the pass, bit for bit
    before = offload.evaluate(offload.load(_squeeze_excitation(restore)), X)["y"]
    np.testing.assert_array_equal(offload.evaluate(out, X)["y"], before)


def test_with_the_default_pipeline_no_transpose_is_left():
    """keepdims=1 lets transpose_regions take the reduction: the block runs channels-first."""
    data = _squeeze_excitation(FROM_SHAPE)
    out = check_against_onnxruntime(data, list(DEFAULT), X, rtol=1e-5, atol=1e-6)
    types = op_types(out)
    assert types["Transpose"] == types["Shape"] == types["Reshape"] == 0, types


def test_a_reshape_to_another_shape_stays():
    restore = [node("Reshape", ["m", "bad"], ["r0"]), node("Unsqueeze", ["r0", "zero"], ["r"])]
    data = _squeeze_excitation(restore)
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
