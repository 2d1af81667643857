"""optimize_repeat_ops::transpose_regions: layout-free ops between channels-last / channels-first
Transposes move to the convolutions' side, checked against onnxruntime on the original model."""

import numpy as np
import onnxruntime as ort
import pytest

import offload

from .helpers import F32, model, node, op_types, optimized, rand
from .helpers import check as check_against_onnxruntime

P = ["optimize_repeat_ops::transpose_regions"]
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
X = {"x": rand(1, 4, 6, 5, seed=1)}


def check(data: bytes, passes, feeds: dict):
    """Against onnxruntime (its Conv sums in another order), and bit for bit against the program
    before the pass: the rewrite moves no arithmetic."""
    out = check_against_onnxruntime(data, passes, feeds, rtol=1e-5, atol=1e-5)
    before, after = offload.evaluate(offload.load(data), feeds), offload.evaluate(out, feeds)
    for name, want in before.items():
        np.testing.assert_array_equal(after[name], want, err_msg=name)
    return out


def _conv(name_in, name_out, w, pads=(1, 1, 1, 1)):
    """A channels-first Conv wrapped as the TFLite importer writes it: NHWC in, NHWC out."""
    return [
        node("Transpose", [name_in], [f"{name_out}_in"], perm=TO_NCHW),
        node("Conv", [f"{name_out}_in", w], [f"{name_out}_c"], pads=list(pads)),
        node("Transpose", [f"{name_out}_c"], [name_out], perm=TO_NHWC),
    ]


def _residual_model(extra_output=False):
    """x (NCHW) → NHWC; PRelu; a conv branch; Add with the skip; Pad; PRelu; a conv; back to NCHW."""
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("PRelu", ["a", "s1"], ["r"]),
        *_conv("r", "b", "w1"),
        node("Add", ["r", "b"], ["sum"]),
        node("Pad", ["sum", "pads"], ["padded"]),
        node("PRelu", ["padded", "s2"], ["r2"]),
        *_conv("r2", "c", "w2", pads=(0, 0, 0, 0)),
        node("Mul", ["c", "k"], ["m"]),
        node("Transpose", ["m"], ["y"], perm=TO_NCHW),
    ]
    inits = {
        "s1": rand(1, 1, 4, seed=2),
        "s2": rand(4, seed=3),
        "w1": rand(4, 4, 3, 3, seed=4),
        "w2": rand(3, 4, 1, 1, seed=5),
        "pads": np.array([0, 1, 0, 0, 0, 2, 1, 0], np.int64),  # H and W, begin and end
        "k": rand(1, 1, 1, 3, seed=6),
    }
    outputs = {"y": (F32, None)}
    if extra_output:
        outputs["sum"] = (F32, None)
    return model(nodes, {"x": (F32, [1, 4, 6, 5])}, outputs, inits)


def test_residual_nhwc_graph_keeps_no_transpose():
    out = check(_residual_model(), P, X)
    assert op_types(out)["Transpose"] == 0
    assert op_types(out)["Conv"] == 2


def test_a_value_read_outside_the_region_gets_one_transpose_back():
    out = check(_residual_model(extra_output=True), P, X)
    assert op_types(out)["Transpose"] == 1


def test_concat_axis_is_renumbered():
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("Relu", ["a"], ["r"]),
        node("Concat", ["r", "a", "c"], ["cat"], axis=-1),
        node("Transpose", ["cat"], ["y"], perm=TO_NCHW),
    ]
    data = model(nodes, {"x": (F32, [1, 4, 6, 5])}, {"y": (F32, None)}, {"c": rand(1, 6, 5, 2, seed=7)})
    out = check(data, P, X)
    assert op_types(out) == {"Relu": 1, "Concat": 1}


@pytest.mark.parametrize(
    "inputs, attrs, inits",
    [
        (["a", "", "", "sizes"], {"axes": [1, 2], "mode": "linear"}, {"sizes": np.array([11, 7], np.int64)}),
        (["a", "", "scales"], {"mode": "linear"}, {"scales": np.array([1, 2, 1.5, 1], np.float32)}),
        (
            ["a", "", "", "sizes"],
            {"axes": [2, 1], "mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
            {"sizes": np.array([3, 4], np.int64)},
        ),
    ],
    ids=["bilinear-hw", "all-axes", "nearest-wh"],
)
def test_resize_between_the_transposes_resizes_the_other_layout(inputs, attrs, inits):
    """A TFLite RESIZE_BILINEAR between convolutions: its axes renumbered, in their order."""
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("Resize", inputs, ["r"], **attrs),
        node("Relu", ["r"], ["u"]),
        node("Transpose", ["u"], ["y"], perm=TO_NCHW),
    ]
    data = model(nodes, {"x": (F32, [1, 4, 6, 5])}, {"y": (F32, None)}, inits, opset=19)
    _, out = optimized(data, P)
    assert op_types(out) == {"Resize": 1, "Relu": 1}
    # onnxruntime's own transpose optimizer fails on a Resize with axes: the graph as written
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    got = offload.evaluate(out, X)["y"]
    np.testing.assert_allclose(got, session.run(None, X)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, offload.evaluate(offload.load(data), X)["y"])


def test_boundary_input_of_the_other_layout_is_transposed_once():
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("Sigmoid", ["a"], ["s"]),
        node("Add", ["s", "z"], ["sum"]),  # z arrives channels-last from outside
        node("Mul", ["sum", "a"], ["m"]),
        node("Transpose", ["m"], ["y"], perm=TO_NCHW),
        node("Transpose", ["sum"], ["y2"], perm=TO_NCHW),
    ]
    feeds = {**X, "z": rand(1, 6, 5, 4, seed=8)}
    data = model(
        nodes, {"x": (F32, [1, 4, 6, 5]), "z": (F32, [1, 6, 5, 4])}, {"y": (F32, None), "y2": (F32, None)}
    )
    out = check(data, P, feeds)
    assert op_types(out)["Transpose"] == 1  # z's; three of the four are gone


@pytest.mark.parametrize(
    "middle, outputs",
    [
        # one entry, and its result is returned: nothing saved
        ([node("Relu", ["a"], ["m"])], {"m": (F32, None)}),
        # the layout decides Softmax's axis: not a layout-free op
        (
            [node("Softmax", ["a"], ["s"], axis=-1), node("Transpose", ["s"], ["m"], perm=TO_NCHW)],
            {"m": (F32, None)},
        ),
        # a Pad whose pads come at run time
        ([node("Pad", ["a", "p"], ["s"]), node("Transpose", ["s"], ["m"], perm=TO_NCHW)], {"m": (F32, None)}),
    ],
    ids=["nothing-saved", "softmax", "runtime-pads"],
)
def test_regions_that_stay(middle, outputs):
    nodes = [node("Transpose", ["x"], ["a"], perm=TO_NHWC), *middle]
    inputs = {"x": (F32, [1, 4, 6, 5])}
    feeds = dict(X)
    if any("p" in n.input for n in middle):
        inputs["p"] = (7, [8])  # int64
        feeds["p"] = np.array([0, 1, 0, 0, 0, 0, 1, 0], np.int64)
    original, out = optimized(model(nodes, inputs, outputs), P)
    assert op_types(out) == op_types(original)


def test_an_exit_that_is_a_graph_output_of_the_graph_input_stays():
    """y = Transpose back of Transpose(x) is a function output and x a graph input: y cannot
    become x (an output keeps its name), so that exit stays; the rest of the region moves."""
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("Transpose", ["a"], ["y"], perm=TO_NCHW),
        node("Relu", ["a"], ["r"]),
        node("Transpose", ["r"], ["z"], perm=TO_NCHW),
    ]
    data = model(nodes, {"x": (F32, [1, 4, 6, 5])}, {"y": (F32, None), "z": (F32, None)})
    out = check(data, P, X)
    assert [o.name for o in out.main.outputs] == ["y", "z"]


@pytest.mark.parametrize(
    "reduce, opset, inits",
    [
        (node("ReduceMean", ["a"], ["m"], axes=[1, 2]), 13, {}),
        (node("ReduceMax", ["a", "axes"], ["m"]), 18, {"axes": np.array([-3, 2], np.int64)}),
        (node("ReduceSum", ["a", "axes"], ["m"]), 13, {"axes": np.array([3], np.int64)}),
    ],
    ids=["mean-hw-attribute", "max-hw-input", "sum-c-input"],
)
def test_a_reduction_that_keeps_dims_reduces_the_other_layout(reduce, opset, inits):
    """A squeeze-and-excitation block as a TFLite file gives it: MEAN over H and W of the
    channels-last array, a 1x1 Conv, Sigmoid, Mul with the block's input. The reduction's axes
    are renumbered and both Transposes go; the sum adds the same terms in the channels-first
    order (within float rounding of onnxruntime and of the graph before the pass)."""
    ch = 1 if reduce.op_type == "ReduceSum" else 4
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        reduce,
        *_conv("m", "e", "w", pads=(0, 0, 0, 0)),
        node("Sigmoid", ["e"], ["g"]),
        node("Mul", ["a", "g"], ["s"]),
        node("Transpose", ["s"], ["y"], perm=TO_NCHW),
    ]
    inits = {**inits, "w": rand(4, ch, 1, 1, seed=9)}
    data = model(nodes, {"x": (F32, [1, 4, 6, 5])}, {"y": (F32, None)}, inits, opset=opset)
    out = check_against_onnxruntime(data, P, X, rtol=1e-5, atol=1e-6)
    assert op_types(out)["Transpose"] == 0
    before, after = offload.evaluate(offload.load(data), X)["y"], offload.evaluate(out, X)["y"]
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)


def test_a_reduction_that_drops_dims_stays():
    nodes = [
        node("Transpose", ["x"], ["a"], perm=TO_NHWC),
        node("ReduceMean", ["a"], ["m"], axes=[1, 2], keepdims=0),
        node("Relu", ["m"], ["y"]),
    ]
    original, out = optimized(model(nodes, {"x": (F32, [1, 4, 6, 5])}, {"y": (F32, None)}), P)
    assert op_types(out) == op_types(original)
