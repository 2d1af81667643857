"""The prepared calls of LinearClassifier (several classes) and Normalizer
(runtime/kernels/ml_linear_prepared.py): taken where they apply, against onnxruntime on the same
models and bit for bit against offload.evaluate (the kernels); the cases they leave to the kernel
still run it."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.runtime.kernels.ml_linear_prepared import _LinearClassifierCall, _NormalizerCall
from offload.runtime.steps import _KernelStep, _PreparedOutputsStep, _PreparedStep
from tests.runtime.ml_support import assert_same, ml_model, ml_node, run_onnxruntime

RNG = np.random.default_rng(11)


def _run(data: bytes, feeds: dict):
    program = offload.load(data)
    module = offload.runtime.load(offload.save(program))
    return module, module.run(feeds), offload.evaluate(program, feeds)


def _steps(module, kind) -> list:
    return [s for s in module.method("forward")._steps if isinstance(s, kind)]


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("norm", ["L1", "L2", "MAX"])
@pytest.mark.parametrize("shape", [(5, 4), (4,)])
@pytest.mark.parametrize("labels", [[4, 2, 9], [0, 1, 2]])
def test_classifier_and_normalizer(post_transform, norm, shape, labels):
    """The logistic-regression chain skl2onnx writes: LinearClassifier then Normalizer; labels
    0, 1, 2 are the argmax itself (no table in the call)."""
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    nodes = [
        ml_node(
            "LinearClassifier",
            ["x"],
            ["label", "raw"],
            classlabels_ints=labels,
            coefficients=RNG.standard_normal(12).astype(np.float32).tolist(),
            intercepts=[0.25, 0.58, -0.94],
            post_transform=post_transform,
        ),
        ml_node("Normalizer", ["raw"], ["probabilities"], norm=norm),
    ]
    data = ml_model(nodes, feeds, {"label": np.int64, "raw": np.float32, "probabilities": np.float32})
    module, got, ref = _run(data, feeds)
    [classifier] = _steps(module, _PreparedOutputsStep)
    assert isinstance(classifier.call, _LinearClassifierCall)
    assert (classifier.call.labels is None) == (labels == [0, 1, 2])
    [normalizer] = _steps(module, _PreparedStep)
    assert isinstance(normalizer.call, _NormalizerCall)
    want = run_onnxruntime(data, feeds)
    for k in want:
        assert_same(got[k], want[k], what=k)
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        assert got[k].dtype == ref[k].dtype


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_normalizer_of_other_input_types(dtype):
    """A float64 or int32 input goes through float32 as the kernel's does."""
    x = (RNG.standard_normal((3, 5)) * 4).astype(dtype)
    x[1] = 0  # a row of norm 0 stays as it is
    data = ml_model([ml_node("Normalizer", ["x"], ["y"], norm="L2")], {"x": x}, {"y": np.float32})
    module, got, ref = _run(data, {"x": x})
    assert [type(s.call) for s in _steps(module, _PreparedStep)] == [_NormalizerCall]
    assert_same(got["y"], run_onnxruntime(data, {"x": x})["y"], what="y")
    np.testing.assert_array_equal(got["y"], ref["y"])


def test_classifier_with_string_labels_or_one_column_runs_the_kernel():
    feeds = {"x": RNG.standard_normal((4, 3)).astype(np.float32)}
    nodes = [
        ml_node(
            "LinearClassifier",
            ["x"],
            ["label", "scores"],
            classlabels_strings=["a", "b", "c"],
            coefficients=RNG.standard_normal(9).astype(np.float32).tolist(),
            intercepts=[0.1, 0.2, 0.3],
        ),
        ml_node(
            "LinearClassifier",
            ["x"],
            ["label2", "scores2"],
            classlabels_ints=[0, 1],
            coefficients=[0.5, -1.0, 0.25],
            intercepts=[0.05],
            post_transform="LOGISTIC",
        ),
    ]
    outs = {"label": object, "scores": np.float32, "label2": np.int64, "scores2": np.float32}
    data = ml_model(nodes, feeds, outs)
    module, got, _ = _run(data, feeds)
    assert not _steps(module, _PreparedOutputsStep)
    assert len(_steps(module, _KernelStep)) == 2
    want = run_onnxruntime(data, feeds)
    for k in want:
        assert_same(got[k], want[k], what=k)
