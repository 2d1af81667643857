"""ai.onnx.ml SVMRegressor and SVMClassifier (runtime/kernels/ml_svm.py), saved as a .pte and run
by the CPU executor, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from offload.errors import UnsupportedOpError
from tests.runtime.ml_support import check, ml_model, ml_node, run_offload

RNG = np.random.default_rng(9)
# onnxruntime requires kernel_params even where the kernel has no parameter (LINEAR).
KERNELS = {
    "LINEAR": [0.1, 0.0, 1.0],
    "POLY": [0.3, 0.5, 3.0],
    "RBF": [0.4, 0.0, 0.0],
    "SIGMOID": [0.2, -0.1, 0.0],
}


@pytest.mark.parametrize("kernel_type", list(KERNELS))
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor_with_support_vectors(kernel_type, one_class):
    vectors, features = 5, 3
    attrs = {
        "kernel_type": kernel_type,
        "n_supports": vectors,
        "support_vectors": RNG.standard_normal(vectors * features).astype(np.float32).tolist(),
        "coefficients": RNG.standard_normal(vectors).astype(np.float32).tolist(),
        "rho": [0.25],
        "one_class": one_class,
        "kernel_params": KERNELS[kernel_type],
    }
    feeds = {"x": RNG.standard_normal((7, features)).astype(np.float32)}
    check([ml_node("SVMRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})


def test_svm_regressor_linear_without_support_vectors():
    attrs = {"coefficients": [0.5, -1.5, 2.0], "rho": [-0.3], "post_transform": "LOGISTIC"}
    attrs.update(kernel_type="RBF", kernel_params=KERNELS["RBF"])  # without support vectors: LINEAR
    feeds = {"x": RNG.standard_normal((4, 3)).astype(np.float32)}
    check([ml_node("SVMRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})


def test_svm_regressor_refuses_short_support_vectors():
    attrs = {"n_supports": 3, "support_vectors": [1.0] * 5, "coefficients": [1.0] * 3, "rho": [0.0]}
    feeds = {"x": RNG.standard_normal((2, 2)).astype(np.float32)}
    data = ml_model([ml_node("SVMRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})
    with pytest.raises(UnsupportedOpError, match="SVMRegressor: 5 support vector values"):
        run_offload(data, feeds)


def _classifier(classes: int, mode: str, kernel_type: str, proba: bool, strings: bool, post_transform: str):
    features, counts = 3, [2, 3, 1, 2][:classes]
    attrs = {
        "kernel_type": kernel_type,
        "kernel_params": KERNELS[kernel_type],
        "post_transform": post_transform,
    }
    if strings:
        attrs["classlabels_strings"] = ["ant", "bee", "cat", "dog"][:classes]
    else:
        attrs["classlabels_ints"] = [7, 3, 5, 9][:classes]
    pairs = classes * (classes - 1) // 2
    if mode == "svc":
        vectors = sum(counts)
        attrs.update(
            vectors_per_class=counts,
            support_vectors=RNG.standard_normal(vectors * features).astype(np.float32).tolist(),
            coefficients=RNG.standard_normal((classes - 1) * vectors).astype(np.float32).tolist(),
            rho=RNG.standard_normal(pairs).astype(np.float32).tolist(),
        )
        if proba:
            attrs["prob_a"] = (-RNG.random(pairs) * 3 - 0.5).astype(np.float32).tolist()
            attrs["prob_b"] = (RNG.standard_normal(pairs) * 0.2).astype(np.float32).tolist()
    else:
        attrs.update(
            coefficients=RNG.standard_normal(classes * features).astype(np.float32).tolist(), rho=[0.1]
        )
    node = ml_node("SVMClassifier", ["x"], ["label", "scores"], **attrs)
    feeds = {"x": RNG.standard_normal((9, features)).astype(np.float32)}
    return [node], feeds, {"label": object if strings else np.int64, "scores": np.float32}


@pytest.mark.parametrize("classes", [3, 4])
@pytest.mark.parametrize("kernel_type", list(KERNELS))
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_one_vs_one(classes, kernel_type, proba):
    nodes, feeds, outs = _classifier(classes, "svc", kernel_type, proba, classes == 4, "NONE")
    check(nodes, feeds, outs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("mode,proba", [("svc", False), ("svc", True), ("linear", False)])
@pytest.mark.parametrize("classes", [2, 3])
def test_svm_classifier_post_transforms(post_transform, mode, proba, classes):
    nodes, feeds, outs = _classifier(classes, mode, "RBF", proba, False, post_transform)
    check(nodes, feeds, outs, rtol=1e-4, atol=1e-5)


def test_svm_classifier_linear_binary_with_positive_coefficients():
    """All coefficients >= 0: the second class wins wherever the best score reaches 0.5, even
    where the first class scores more (the last two rows); below 0.5 the best class wins."""
    attrs = {
        "coefficients": [0.2, 0.1, 0.3, 0.05, 0.4, 0.1],
        "rho": [0.1],
        "kernel_params": KERNELS["LINEAR"],
    }
    node = ml_node("SVMClassifier", ["x"], ["label", "scores"], classlabels_strings=["ant", "bee"], **attrs)
    x = np.array([[0, 0, 0], [0.1, 0.2, 0], [0, 0.5, 0.2], [2, 2, 2], [1, 0, 1]], np.float32)
    got = check([node], {"x": x}, {"label": object, "scores": np.float32})
    assert got["label"].tolist() == ["ant", "bee", "bee", "bee", "bee"]
