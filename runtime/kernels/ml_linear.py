"""Linear-model and preprocessing kernels of domain ai.onnx.ml: LinearClassifier, LinearRegressor,
Normalizer, Scaler, Imputer, OneHotEncoder, FeatureVectorizer, ZipMap.

Where the operator spec leaves a case open, these kernels do what onnxruntime's CPU kernels do
(measured against onnxruntime 1.32 in tests/runtime/test_ml_linear.py): a single-target
regressor applies only PROBIT as its post_transform; a single-target classifier needs two class
labels, takes the label by the sign of its score s and writes the scores [1 - t, t], t the
LOGISTIC or PROBIT of s or s itself for the other transforms (onnxruntime leaves the second
column of PROBIT unwritten); Normalizer leaves rows that sum (L1, L2) or peak (MAX) at 0 as they
are.
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported
from .ml import ML, _probit, _softmax

# post_transform attribute values of the ai.onnx.ml opset-1 ops.
_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _rows(op: str, X: np.ndarray) -> np.ndarray:
    """X as [N, C] float32: a 1-D input is one row; rank 0 or above 2 is refused."""
    if X.ndim not in (1, 2):
        raise unsupported(op, f"an input of rank {X.ndim} (must be [C] or [N, C])")
    return X.reshape(1, -1).astype(np.float32) if X.ndim == 1 else X.astype(np.float32)


def _transform(op: str, scores: np.ndarray, kind: str) -> np.ndarray:
    """The post_transform of [N, targets] scores; with one target, only PROBIT applies."""
    if kind not in _TRANSFORMS:
        raise unsupported(op, f"post_transform '{kind}'")
    if kind == "NONE" or (scores.shape[1] == 1 and kind != "PROBIT"):
        return scores
    s = scores.astype(np.float64)
    if kind == "LOGISTIC":
        s = 1 / (1 + np.exp(-s))
    elif kind == "PROBIT":
        s = _probit(s)
    else:
        s = _softmax(s, ignore_zeros=kind == "SOFTMAX_ZERO")
    return s.astype(np.float32)


def _weights(op: str, coefficients, intercepts, targets: int | None, features: int):
    """coefficients as [targets, features] and intercepts as [targets] (zeros when absent).

    ``targets`` is the number of intercepts (LinearClassifier) or the ``targets`` attribute
    (LinearRegressor), or None to take it from the coefficients' count. A model with more
    coefficients than targets x features is read from the first ones, as onnxruntime reads it
    (onnxruntime's own logreg_iris.onnx declares 2 input features for 3 x 4 coefficients)."""
    coef = np.asarray(coefficients if coefficients is not None else [], np.float32)
    if targets is None:
        targets = coef.size // features if features and coef.size % features == 0 else 0
    if features == 0 or targets == 0 or coef.size < targets * features:
        raise unsupported(op, f"{coef.size} coefficients for {targets or '?'} targets of {features} features")
    coef = coef[: targets * features].reshape(targets, features)
    bias = np.zeros(targets, np.float32) if not intercepts else np.asarray(intercepts, np.float32)
    if bias.shape != (targets,):
        raise unsupported(op, f"{bias.size} intercepts for {targets} targets")
    return coef, bias


@kernel("LinearClassifier", domain=ML)
def linear_classifier(
    ctx, X, *, classlabels_ints, classlabels_strings, coefficients, intercepts, post_transform, **_
):
    op = "LinearClassifier"
    x = _rows(op, X)
    coef, bias = _weights(op, coefficients, intercepts, len(intercepts) if intercepts else None, x.shape[1])
    scores = x @ coef.T + bias
    labels = np.asarray(classlabels_strings, object) if classlabels_strings else None
    if labels is None:
        labels = np.asarray(classlabels_ints if classlabels_ints else [], np.int64)
    targets = scores.shape[1]
    if targets == 1:
        if len(labels) != 2:
            raise unsupported(
                op, f"one score column with {len(labels)} class labels (a binary classifier has 2)"
            )
        label = np.where(scores[:, 0] > 0, labels[1], labels[0]).astype(labels.dtype)
        if post_transform == "LOGISTIC":
            scores = (1 / (1 + np.exp(-scores.astype(np.float64)))).astype(np.float32)
        else:
            scores = _transform(op, scores, post_transform)
        return label, np.concatenate([1 - scores, scores], axis=1)
    if len(labels) != targets:
        raise unsupported(op, f"{len(labels)} class labels for {targets} score columns")
    return labels[np.argmax(scores, axis=1)], _transform(op, scores, post_transform)


@kernel("LinearRegressor", domain=ML)
def linear_regressor(ctx, X, *, coefficients, intercepts, post_transform, targets):
    op = "LinearRegressor"
    x = _rows(op, X)
    coef, bias = _weights(op, coefficients, intercepts, targets, x.shape[1])
    return _transform(op, x @ coef.T + bias, post_transform)


@kernel("Normalizer", domain=ML)
def normalizer(ctx, X, *, norm):
    op = "Normalizer"
    x = _rows(op, X).astype(np.float64)
    if norm == "MAX":
        scale = x.max(axis=1, keepdims=True)
    elif norm == "L1":
        scale = np.abs(x).sum(axis=1, keepdims=True)
    elif norm == "L2":
        scale = np.sqrt((x * x).sum(axis=1, keepdims=True))
    else:
        raise unsupported(op, f"norm '{norm}' (one of MAX, L1, L2)")
    out = np.divide(x, scale, out=x.copy(), where=scale != 0)
    return out.astype(np.float32).reshape(X.shape)


def _per_feature(op: str, name: str, values, features: int) -> np.ndarray:
    """A per-feature attribute: one value for all features, or one per feature."""
    v = np.asarray(values if values is not None else [], np.float32)
    if v.size not in (1, features):
        raise unsupported(op, f"{v.size} {name} values for inputs of {features} features")
    return v


@kernel("Scaler", domain=ML)
def scaler(ctx, X, *, offset, scale):
    op = "Scaler"
    if X.ndim == 0:
        raise unsupported(op, "a scalar input")
    features = X.shape[-1]
    shift = _per_feature(op, "offset", offset if offset else [0.0], features)
    factor = _per_feature(op, "scale", scale if scale else [1.0], features)
    return ((X.astype(np.float32) - shift) * factor).astype(np.float32)


@kernel("Imputer", domain=ML)
def imputer(
    ctx, X, *, imputed_value_floats, imputed_value_int64s, replaced_value_float, replaced_value_int64
):
    op = "Imputer"
    if X.ndim == 0:
        raise unsupported(op, "a scalar input")
    features = X.shape[-1]
    if X.dtype.kind == "f":
        fill = _per_feature(op, "imputed_value_floats", imputed_value_floats, features).astype(X.dtype)
        hit = np.isnan(X) if np.isnan(replaced_value_float) else np.float32(replaced_value_float) == X
    elif X.dtype.kind in "iu":
        values = list(imputed_value_int64s or [])
        if len(values) not in (1, features):
            raise unsupported(op, f"{len(values)} imputed_value_int64s for inputs of {features} features")
        fill = np.asarray(values, X.dtype)
        hit = replaced_value_int64 == X
    else:
        raise unsupported(op, f"an input of type {X.dtype}")
    return np.where(hit, np.broadcast_to(fill, X.shape), X)


@kernel("OneHotEncoder", domain=ML)
def one_hot_encoder(ctx, X, *, cats_int64s, cats_strings, zeros):
    op = "OneHotEncoder"
    if cats_strings:
        cats = list(cats_strings)
        keys = [str(v) for v in X.reshape(-1)] if X.dtype == object else None
        if keys is None:
            raise unsupported(op, f"a {X.dtype} input with cats_strings (needs a string input)")
    elif cats_int64s:
        cats = [int(c) for c in cats_int64s]
        if X.dtype == object:
            raise unsupported(op, "a string input with cats_int64s (needs a numeric input)")
        keys = X.reshape(-1).astype(np.int64).tolist()
    else:
        raise unsupported(op, "a model without cats_int64s or cats_strings")
    position = {c: i for i, c in enumerate(cats)}
    out = np.zeros((len(keys), len(cats)), np.float32)
    found = [position.get(k, -1) for k in keys]
    if not zeros and -1 in found:
        missing = keys[found.index(-1)]
        raise unsupported(op, f"the category {missing!r}, absent from the categories with zeros=0")
    rows = [r for r, p in enumerate(found) if p >= 0]
    out[rows, [found[r] for r in rows]] = 1
    return out.reshape(*X.shape, len(cats))


@kernel("FeatureVectorizer", domain=ML)
def feature_vectorizer(ctx, *X, inputdimensions):
    op = "FeatureVectorizer"
    widths = list(inputdimensions or [])
    if len(widths) != len(X):
        raise unsupported(op, f"{len(X)} inputs for {len(widths)} inputdimensions")
    rows = {x.shape[0] if x.ndim > 1 else 1 for x in X}
    if len(rows) != 1:
        raise unsupported(op, f"inputs of different batch sizes {sorted(rows)}")
    n = rows.pop()
    parts = []
    for x, width in zip(X, widths):
        flat = x.reshape(n, -1).astype(np.float32)
        part = np.zeros((n, width), np.float32)
        keep = min(width, flat.shape[1])  # longer rows are cut, shorter ones padded with 0
        part[:, :keep] = flat[:, :keep]
        parts.append(part)
    return np.concatenate(parts, axis=1)


@kernel("ZipMap", domain=ML)
def zip_map(ctx, X, *, classlabels_int64s, classlabels_strings):
    """A sequence of maps, one per row of X: {class label: score} as Python ints or strings to
    floats, the way onnxruntime's Python API returns it."""
    op = "ZipMap"
    if classlabels_strings and classlabels_int64s:
        raise unsupported(op, "both classlabels_strings and classlabels_int64s")
    labels = (
        [str(s) for s in classlabels_strings]
        if classlabels_strings
        else [int(i) for i in classlabels_int64s or []]
    )
    # float32 rows read where they are: tolist gives the same Python floats as of a copy
    x = X if X.ndim == 2 and X.dtype == np.float32 else _rows(op, X)
    if x.shape[1] != len(labels):
        raise unsupported(op, f"{x.shape[1]} score columns for {len(labels)} class labels")
    return [dict(zip(labels, row)) for row in x.tolist()]  # float32 to Python floats: exact
