"""Inference rules of the ai.onnx.ml ops whose outputs are tensors (ZipMap's sequence of maps has
no IR type and stays untyped).

Their inputs are [N, C] or one row [C]: a rule reads N from the input (1 for one row) and the
output widths from the attributes; scores are float32 whatever the input type.
"""

from __future__ import annotations

from .infer_dims import _tensor
from .registry import inference
from .types import DataType, TensorType

ML = "ai.onnx.ml"


def _rows(op) -> tuple[bool, object]:
    """(known, N): N of the op's [N, C] or [C] input (None where unknown)."""
    t = _tensor(op, 0)
    if t is None or t.shape is None or len(t.shape) not in (1, 2):
        return False, None
    return True, (1 if len(t.shape) == 1 else t.shape[0])


def _scores(op, width) -> TensorType | None:
    known, n = _rows(op)
    return TensorType(DataType.FLOAT, (n, width)) if known else TensorType(DataType.FLOAT, None)


def _labels(op, attrs, strings: str) -> TensorType:
    known, n = _rows(op)
    dtype = DataType.STRING if attrs.get(strings) else DataType.INT64
    return TensorType(dtype, (n,) if known else None)


def _same_shape(op, dtype: DataType | None = None) -> list:
    t = _tensor(op, 0)
    return [None if t is None else TensorType(dtype or t.dtype, t.shape)]


@inference("LinearClassifier", domain=ML)
def _linear_classifier(op, attrs):
    targets = len(attrs.get("intercepts") or []) or None
    width = 2 if targets == 1 else targets
    return [_labels(op, attrs, "classlabels_strings"), _scores(op, width)]


@inference("LinearRegressor", domain=ML)
def _linear_regressor(op, attrs):
    return [_scores(op, attrs.get("targets"))]


@inference("SVMRegressor", domain=ML)
def _svm_regressor(op, attrs):
    return [_scores(op, 1)]


@inference("SVMClassifier", domain=ML)
def _svm_classifier(op, attrs):
    classes = len(attrs.get("classlabels_strings") or attrs.get("classlabels_ints") or []) or None
    width = classes
    if classes and attrs.get("vectors_per_class") and not attrs.get("prob_a"):  # one score a class pair
        width = 2 if classes == 2 else classes * (classes - 1) // 2
    return [_labels(op, attrs, "classlabels_strings"), _scores(op, width)]


@inference("TreeEnsembleRegressor", domain=ML)
def _tree_ensemble_regressor(op, attrs):
    return [_scores(op, attrs.get("n_targets") or 1)]


@inference("TreeEnsembleClassifier", domain=ML)
def _tree_ensemble_classifier(op, attrs):
    classes = len(attrs.get("classlabels_strings") or attrs.get("classlabels_int64s") or []) or None
    return [_labels(op, attrs, "classlabels_strings"), _scores(op, classes)]


@inference("Normalizer", "Scaler", domain=ML)
def _float_like_input(op, attrs):
    return _same_shape(op, DataType.FLOAT)


@inference("Imputer", "Binarizer", domain=ML)
def _like_input(op, attrs):
    return _same_shape(op)


@inference("OneHotEncoder", domain=ML)
def _one_hot_encoder(op, attrs):
    t = _tensor(op, 0)
    cats = len(attrs.get("cats_strings") or attrs.get("cats_int64s") or [])
    if t is None or t.shape is None:
        return [TensorType(DataType.FLOAT, None)]
    return [TensorType(DataType.FLOAT, (*t.shape, cats))]


@inference("FeatureVectorizer", domain=ML)
def _feature_vectorizer(op, attrs):
    known, n = _rows(op)
    width = sum(attrs.get("inputdimensions") or [])
    return [TensorType(DataType.FLOAT, (n, width) if known else None)]
