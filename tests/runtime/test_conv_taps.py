"""The conv recipe's ``taps`` path (runtime/kernels/conv_recipe.py, ``_ConvRecipe.taps``): a one-group conv at
stride 1 with at most half as many output as input channels (DenseNet's 128 -> 32 3 x 3 convs)
as one BLAS product by all the taps' weights of the padded image's flat rows, then the taps'
products summed at their offsets. Against onnxruntime over kernels, paddings and dilations,
batches, with and without bias, with its Relu fused, with weights the graph computes; the .pte
bit for bit what offload.evaluate gives (both run the plan); the convs that keep another path."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.steps import _PreparedStep

from .onnx_graphs import model_bytes

F32 = TensorProto.FLOAT

# (input shape, output channels, kernel, pads, dilations)
CASES = [
    ((1, 128, 14, 14), 32, (3, 3), (1, 1, 1, 1), (1, 1)),
    ((2, 64, 9, 11), 16, (3, 3), (1, 1, 1, 1), (1, 1)),
    ((1, 40, 10, 7), 8, (3, 2), (0, 1, 2, 0), (2, 1)),
    ((1, 20, 6, 6), 10, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 30, 12, 12), 7, (5, 5), (2, 2, 2, 2), (1, 1)),
    ((1, 16, 8, 9), 8, (3, 3), (0, 0, 0, 0), (1, 1)),
]


def _model(case, bias: bool = True, relu: bool = False, weights_in: bool = False) -> bytes:
    shape, m, kernel, pads, dilations = case
    rng = np.random.default_rng(sum(shape) + m)
    w = (rng.standard_normal((m, shape[1], *kernel)) * 0.2).astype(np.float32)
    inits, inputs = [], [("x", F32, list(shape))]
    if weights_in:  # weights the graph computes: 1 * w, read again at each run
        inputs.append(("w0", F32, list(w.shape)))
        inits.append(("one", np.ones((), np.float32)))
        nodes = [helper.make_node("Mul", ["w0", "one"], ["w"])]
    else:
        inits.append(("w", w))
        nodes = []
    names = ["x", "w"]
    if bias:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
        names.append("b")
    conv = dict(kernel_shape=list(kernel), pads=list(pads), dilations=list(dilations))
    nodes.append(helper.make_node("Conv", names, ["c" if relu else "y"], **conv))
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return model_bytes(nodes, inputs, [("y", F32, None)], inits, opset=17), w


def _run(data, feeds_list):
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        for _ in range(2):  # the second run reuses the bound calls
            got = method.run(feeds)["y"]
            assert np.array_equal(got, offload.evaluate(program, feeds)["y"])
            (want,) = session.run(None, feeds)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return method


def _paths(method) -> list[str]:
    return [
        s.call.recipe.path
        for s in method._steps
        if isinstance(s, _PreparedStep) and hasattr(s.call, "recipe")
    ]


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-k{c[2]}-p{c[3]}-d{c[4]}" for c in CASES])
def test_taps_path_matches_onnxruntime_and_evaluate(case, bias, relu):
    data, _ = _model(case, bias, relu)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal(case[0]).astype(np.float32)} for _ in range(2)]
    method = _run(data, feeds)
    assert _paths(method) == ["taps"]


def test_weights_the_graph_computes_are_read_again_at_each_run():
    case = CASES[1]
    data, w = _model(case, weights_in=True)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(case[0]).astype(np.float32)
    method = _run(data, [{"x": x, "w0": w}, {"x": x, "w0": (w * -1.5).astype(np.float32)}])
    assert "taps" in _paths(method)


@pytest.mark.parametrize(
    "case,path",
    [
        (((1, 16, 8, 8), 9, (3, 3), (1, 1, 1, 1), (1, 1)), "columns"),  # more than half the channels
        (((1, 16, 8, 8), 16, (3, 3), (1, 1, 1, 1), (1, 1)), "columns"),
        (((1, 16, 8, 8), 8, (1, 1), (0, 0, 0, 0), (1, 1)), "pointwise"),
    ],
)
def test_other_convs_keep_their_paths(case, path):
    data, _ = _model(case)
    x = np.random.default_rng(3).standard_normal(case[0]).astype(np.float32)
    assert _paths(_run(data, [{"x": x}])) == [path]
