"""The ai.onnx.ml linear-model and preprocessing kernels (runtime/kernels/ml_linear.py), saved as a
.pte and run by the CPU executor, against onnxruntime on the same one-node models (and, for
PROBIT, against the normal quantile of Python's statistics module)."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from offload.errors import UnsupportedOpError
from tests.runtime.ml_support import check, ml_model, ml_node, run_offload, run_onnxruntime

RNG = np.random.default_rng(5)


def _scores_model(op: str, feeds, labels: dict, **attrs):
    label_kind = object if "classlabels_strings" in labels else np.int64
    node = ml_node(op, ["x"], ["label", "scores"], **labels, **attrs)
    return [node], {"label": label_kind, "scores": np.float32}


# ---- LinearClassifier ---------------------------------------------------------------------------

TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]


@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize(
    "labels", [{"classlabels_ints": [3, 1, 7]}, {"classlabels_strings": ["a", "b", "c"]}]
)
def test_linear_classifier_multiclass(post_transform, labels):
    feeds = {"x": RNG.standard_normal((6, 4)).astype(np.float32)}
    coefficients = RNG.standard_normal(12).astype(np.float32).tolist()
    nodes, outs = _scores_model(
        "LinearClassifier",
        feeds,
        labels,
        coefficients=coefficients,
        intercepts=[0.1, -0.2, 0.3],
        post_transform=post_transform,
        multi_class=1,
    )
    check(nodes, feeds, outs)


@pytest.mark.parametrize("post_transform", TRANSFORMS)
@pytest.mark.parametrize("labels", [{"classlabels_ints": [0, 1]}, {"classlabels_strings": ["no", "yes"]}])
def test_linear_classifier_binary_single_target(post_transform, labels):
    """One score column with two labels: the label by the score's sign, the scores [1 - t, t]
    (t the logistic of the score, or the score itself where the transform takes several)."""
    feeds = {"x": RNG.standard_normal((7, 3)).astype(np.float32)}
    nodes, outs = _scores_model(
        "LinearClassifier",
        feeds,
        labels,
        coefficients=[0.5, -1.0, 0.25],
        intercepts=[0.05],
        post_transform=post_transform,
    )
    got = check(nodes, feeds, outs)
    assert got["scores"].shape == (7, 2)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_linear_classifier_other_input_types_and_one_row(dtype):
    x = (RNG.standard_normal(4) * 3).astype(dtype)
    nodes, outs = _scores_model(
        "LinearClassifier",
        {"x": x},
        {"classlabels_ints": [0, 1, 2]},
        coefficients=RNG.standard_normal(12).astype(np.float32).tolist(),
        intercepts=[0.0, 0.5, -0.5],
        post_transform="SOFTMAX",
    )
    check(nodes, {"x": x}, outs)


def test_linear_classifier_probit_is_the_normal_quantile():
    """onnxruntime's PROBIT approximates the inverse error function (within 2.3e-3 of the normal
    quantile); offload computes the quantile to 1e-9, checked against Python's NormalDist."""
    x = RNG.random((5, 2)).astype(np.float32)
    coef = [0.3, 0.2, 0.1, 0.4]
    nodes, outs = _scores_model(
        "LinearClassifier",
        {"x": x},
        {"classlabels_ints": [0, 1]},
        coefficients=coef,
        intercepts=[0.2, 0.1],
        post_transform="PROBIT",
    )
    got = check(nodes, {"x": x}, outs, rtol=0, atol=3e-3)
    raw = x.astype(np.float64) @ np.array(coef).reshape(2, 2).T + [0.2, 0.1]
    exact = np.vectorize(NormalDist().inv_cdf)(raw)
    np.testing.assert_allclose(got["scores"], exact, rtol=1e-6, atol=1e-6)


def test_linear_classifier_reads_the_first_coefficients_as_onnxruntime_does():
    """More coefficients than intercepts x features (onnxruntime's own logreg_iris.onnx)."""
    feeds = {"x": RNG.standard_normal((3, 2)).astype(np.float32)}
    nodes, outs = _scores_model(
        "LinearClassifier",
        feeds,
        {"classlabels_ints": [0, 1, 2]},
        coefficients=RNG.standard_normal(12).astype(np.float32).tolist(),
        intercepts=[0.2, 0.5, -0.9],
        post_transform="LOGISTIC",
    )
    check(nodes, feeds, outs)


def test_linear_classifier_refuses_one_column_without_two_labels():
    feeds = {"x": RNG.standard_normal((3, 2)).astype(np.float32)}
    nodes, outs = _scores_model(
        "LinearClassifier", feeds, {"classlabels_ints": [0, 1, 2]}, coefficients=[1.0, 2.0], intercepts=[0.0]
    )
    data = ml_model(nodes, feeds, outs)
    with pytest.raises(Exception, match="exactly 2 elements"):
        run_onnxruntime(data, feeds)
    with pytest.raises(UnsupportedOpError, match="LinearClassifier: one score column with 3 class labels"):
        run_offload(data, feeds)


def test_linear_classifier_refuses_too_few_coefficients():
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32)}
    nodes, outs = _scores_model(
        "LinearClassifier", feeds, {"classlabels_ints": [0, 1]}, coefficients=[1.0] * 6, intercepts=[0.0, 0.0]
    )
    with pytest.raises(
        UnsupportedOpError, match="LinearClassifier: 6 coefficients for 2 targets of 4 features"
    ):
        run_offload(ml_model(nodes, feeds, outs), feeds)


# ---- LinearRegressor ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "targets,post_transform,intercepts",
    [
        (1, "NONE", [0.5]),
        (1, "LOGISTIC", None),
        (3, "NONE", None),
        (3, "SOFTMAX", [0.1, 0.2, 0.3]),
        (2, "LOGISTIC", [1, 2]),
    ],
)
def test_linear_regressor(targets, post_transform, intercepts):
    feeds = {"x": RNG.standard_normal((5, 4)).astype(np.float32)}
    attrs = {"targets": targets, "post_transform": post_transform}
    attrs["coefficients"] = RNG.standard_normal(4 * targets).astype(np.float32).tolist()
    if intercepts is not None:
        attrs["intercepts"] = [float(v) for v in intercepts]
    check([ml_node("LinearRegressor", ["x"], ["y"], **attrs)], feeds, {"y": np.float32})


# ---- Normalizer, Scaler, Imputer ----------------------------------------------------------------


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_normalizer(norm, dtype):
    x = (RNG.standard_normal((5, 4)) * 4).astype(dtype)
    x[1] = 0  # a row of zeros stays as it is
    x[2] = -np.abs(x[2]) - 1  # a negative maximum
    check([ml_node("Normalizer", ["x"], ["y"], norm=norm)], {"x": x}, {"y": np.float32})


def test_normalizer_of_one_row():
    x = RNG.standard_normal(6).astype(np.float32)
    check([ml_node("Normalizer", ["x"], ["y"], norm="L2")], {"x": x}, {"y": np.float32})


@pytest.mark.parametrize("offset,scale", [([0.5, -1.0, 2.0], [2.0, 0.5, -1.0]), ([1.5], [0.25])])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler(offset, scale, dtype):
    x = (RNG.standard_normal((4, 3)) * 5).astype(dtype)
    check([ml_node("Scaler", ["x"], ["y"], offset=offset, scale=scale)], {"x": x}, {"y": np.float32})


@pytest.mark.parametrize("fill", [[1.5, -2.0, 7.0], [0.25]])
def test_imputer_replaces_nan(fill):
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    x[RNG.random(x.shape) < 0.3] = np.nan
    node = ml_node("Imputer", ["x"], ["y"], imputed_value_floats=fill, replaced_value_float=float("nan"))
    check([node], {"x": x}, {"y": np.float32})


def test_imputer_replaces_a_value():
    x = RNG.integers(-2, 3, (6, 2)).astype(np.float32)
    node = ml_node("Imputer", ["x"], ["y"], imputed_value_floats=[9.0, 8.0], replaced_value_float=1.0)
    check([node], {"x": x}, {"y": np.float32})
    xi = RNG.integers(-2, 3, (6, 2)).astype(np.int64)
    node = ml_node("Imputer", ["x"], ["y"], imputed_value_int64s=[40], replaced_value_int64=-1)
    check([node], {"x": xi}, {"y": np.int64})


# ---- OneHotEncoder, FeatureVectorizer -----------------------------------------------------------


def test_one_hot_encoder_of_integers_and_strings():
    x = np.array([[3, 1], [7, 2], [5, 3]], np.int64)  # 5 is no category: a row of zeros
    check([ml_node("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 2, 3, 7])], {"x": x}, {"y": np.float32})
    s = np.array(["cat", "dog", "eel", "dog"], object)
    node = ml_node("OneHotEncoder", ["x"], ["y"], cats_strings=["dog", "cat", "ant"])
    check([node], {"x": s}, {"y": np.float32})
    f = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    check([ml_node("OneHotEncoder", ["x"], ["y"], cats_int64s=[4, 1, 2])], {"x": f}, {"y": np.float32})


def test_one_hot_encoder_refuses_an_unknown_category_with_zeros_0():
    x = np.array([[1, 9]], np.int64)
    data = ml_model(
        [ml_node("OneHotEncoder", ["x"], ["y"], cats_int64s=[1, 2], zeros=0)], {"x": x}, {"y": np.float32}
    )
    with pytest.raises(Exception, match="Unknown Category and zeros = 0"):
        run_onnxruntime(data, {"x": x})
    with pytest.raises(UnsupportedOpError, match="OneHotEncoder: the category 9"):
        run_offload(data, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_feature_vectorizer_cuts_and_pads(dtype):
    feeds = {
        "a": (RNG.standard_normal((3, 4)) * 5).astype(dtype),
        "b": (RNG.standard_normal((3, 2)) * 5).astype(dtype),
        "c": (RNG.standard_normal((3, 1)) * 5).astype(dtype),
    }
    node = ml_node("FeatureVectorizer", ["a", "b", "c"], ["y"], inputdimensions=[2, 2, 3])
    got = check([node], feeds, {"y": np.float32})
    assert got["y"].shape == (3, 7)


# ---- ZipMap and a whole sklearn-style classifier ------------------------------------------------


@pytest.mark.parametrize(
    "labels,key",
    [({"classlabels_int64s": [10, 20, 30]}, "int64"), ({"classlabels_strings": ["x", "y", "z"]}, "str")],
)
def test_zip_map(labels, key):
    x = RNG.random((4, 3)).astype(np.float32)
    got = check([ml_node("ZipMap", ["x"], ["z"], **labels)], {"x": x}, {"z": ("map", key)})
    assert len(got["z"]) == 4


def test_zip_map_refuses_a_column_count_other_than_the_labels():
    x = RNG.random((2, 4)).astype(np.float32)
    data = ml_model(
        [ml_node("ZipMap", ["x"], ["z"], classlabels_int64s=[0, 1, 2])], {"x": x}, {"z": ("map", "int64")}
    )
    with pytest.raises(UnsupportedOpError, match="ZipMap: 4 score columns for 3 class labels"):
        run_offload(data, {"x": x})


@pytest.mark.parametrize("norm", ["L1", "MAX"])
def test_sklearn_style_logistic_regression(norm):
    """What skl2onnx writes for a scaled logistic regression: Scaler, LinearClassifier (LOGISTIC),
    Normalizer, ZipMap; labels and probabilities as onnxruntime returns them."""
    feeds = {"x": (RNG.standard_normal((8, 4)) * 3 + 1).astype(np.float32)}
    nodes = [
        ml_node("Scaler", ["x"], ["scaled"], offset=[1.0, 0.9, 1.1, 1.0], scale=[0.3, 0.35, 0.33, 0.31]),
        ml_node(
            "LinearClassifier",
            ["scaled"],
            ["label", "raw"],
            classlabels_strings=["setosa", "versicolor", "virginica"],
            coefficients=RNG.standard_normal(12).astype(np.float32).tolist(),
            intercepts=[0.25, 0.58, -0.94],
            post_transform="LOGISTIC",
        ),
        ml_node("Normalizer", ["raw"], ["probabilities"], norm=norm),
        ml_node(
            "ZipMap",
            ["probabilities"],
            ["output_probability"],
            classlabels_strings=["setosa", "versicolor", "virginica"],
        ),
    ]
    check(nodes, feeds, {"label": object, "output_probability": ("map", "str")})
