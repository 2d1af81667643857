"""Prepared calls of the ai.onnx.ml linear ops (LinearClassifier of several classes, Normalizer):
the weights, class labels and choices their kernels make from the attributes at every call
(runtime/kernels/ml_linear.py), made once when a method loads; the arithmetic is the kernels'
own, expression for expression, so the results are the same bits."""

from __future__ import annotations

import numpy as np

from offload.errors import OffloadError

from . import prepared, prepared_outputs
from .ml import ML
from .ml_linear import _TRANSFORMS, _transform, _weights


def _rows_shape(shape: tuple) -> tuple[int, int] | None:
    """(N, C) of an input of shape [C] or [N, C]; None for another rank."""
    if len(shape) == 1:
        return 1, shape[0]
    return (shape[0], shape[1]) if len(shape) == 2 else None


def _as_rows(X: np.ndarray) -> np.ndarray:
    """``ml_linear._rows`` for an input of the prepared rank: a C-contiguous float32 input is
    read where it is (its float32 copy holds the same values in the same layout)."""
    if X.dtype == np.float32 and X.flags.c_contiguous:
        return X.reshape(1, -1) if X.ndim == 1 else X
    return X.reshape(1, -1).astype(np.float32) if X.ndim == 1 else X.astype(np.float32)


@prepared_outputs("LinearClassifier", domain=ML)
def _linear_classifier_prepared(attrs, inputs, outputs):
    """LinearClassifier with one score column per class (two or more intercepts) and integer
    labels; one score column (the binary case) and string labels are left to the kernel."""
    if len(inputs) != 1 or inputs[0] is None or len(outputs) != 2:
        return None
    dtype, shape = inputs[0]
    rows = _rows_shape(tuple(shape))
    intercepts, post = attrs.get("intercepts"), attrs.get("post_transform")
    if rows is None or dtype.kind not in "fiu" or attrs.get("classlabels_strings"):
        return None
    if not intercepts or len(intercepts) < 2 or post not in _TRANSFORMS:
        return None
    try:
        coef, bias = _weights(
            "LinearClassifier", attrs.get("coefficients"), intercepts, len(intercepts), rows[1]
        )
    except OffloadError:  # the kernel raises it, naming the op
        return None
    labels = np.asarray(attrs.get("classlabels_ints") or [], np.int64)
    targets = coef.shape[0]
    if len(labels) != targets:
        return None
    want = [(np.dtype(np.int64), (rows[0],)), (np.dtype(np.float32), (rows[0], targets))]
    if any(o is not None and (np.dtype(o[0]), tuple(o[1])) != w for o, w in zip(outputs, want)):
        return None
    # labels 0, 1, … (a scikit-learn export's): the label is the column's index
    by_index = np.array_equal(labels, np.arange(targets))
    return _LinearClassifierCall(coef.T, bias, None if by_index else labels, post)


_ONE = np.float64(1.0)  # a float64 scalar: what 1 becomes against float64 values, converted once


class _LinearClassifierCall:
    """The kernel's ``x @ coef.T + bias``, argmax label and post_transform, into the views.
    ``labels`` None: the labels are the columns' indices (the argmax itself)."""

    __slots__ = ("bias", "coef_t", "labels", "post")

    def __init__(self, coef_t: np.ndarray, bias: np.ndarray, labels: np.ndarray | None, post: str):
        self.coef_t, self.bias, self.labels, self.post = coef_t, bias, labels, post

    def __call__(self, outs, X):
        scores = np.matmul(_as_rows(X), self.coef_t)
        np.add(scores, self.bias, out=scores)
        label_out, scores_out = outs
        if label_out is None:
            pass
        elif self.labels is None:
            scores.argmax(axis=1, out=label_out)
        else:
            self.labels.take(scores.argmax(axis=1), out=label_out)
        if scores_out is None:
            pass
        elif self.post == "LOGISTIC":  # the kernel's 1 / (1 + exp(-s)) in float64, in place
            s = np.negative(scores, dtype=np.float64)  # -s exact in either type
            np.exp(s, out=s)
            np.add(s, _ONE, out=s)
            np.divide(_ONE, s, out=scores_out, casting="same_kind")  # rounded as astype(float32)
        else:
            np.copyto(scores_out, _transform("LinearClassifier", scores, self.post), casting="no")
        return label_out, scores_out


@prepared("Normalizer", domain=ML)
def _normalizer_prepared(attrs, inputs, output):
    if len(inputs) != 1 or inputs[0] is None or output is None:
        return None
    dtype, shape = inputs[0]
    norm = attrs.get("norm")
    if _rows_shape(tuple(shape)) is None or dtype.kind not in "fiu" or norm not in _SCALES:
        return None
    if np.dtype(output[0]) != np.float32 or tuple(output[1]) != tuple(shape):
        return None
    return _NormalizerCall(_SCALES[norm])


def _max(x: np.ndarray) -> np.ndarray:
    return x.max(axis=1, keepdims=True)


def _l1(x: np.ndarray) -> np.ndarray:
    return np.add.reduce(np.abs(x), axis=1, keepdims=True)  # what ndarray.sum calls


def _l2(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.add.reduce(x * x, axis=1, keepdims=True))


_SCALES = {"MAX": _max, "L1": _l1, "L2": _l2}


class _NormalizerCall:
    """The kernel's rows (float32) in float64 divided by their norm where it is not 0, in place of the
    kernel's copy, rounded to float32 into the view."""

    __slots__ = ("scale",)

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, out, X):
        x = _as_rows(X).astype(np.float64)
        scale = self.scale(x)
        # no row left as it is: the quotients rounded into the view (count_nonzero: ndarray.all's
        # answer, NaN counted as nonzero alike, without its Python-level wrapper)
        if out.ndim == 2 and np.count_nonzero(scale) == len(scale):
            np.divide(x, scale, out=out, casting="same_kind")
            return
        np.divide(x, scale, out=x, where=scale != 0)
        np.copyto(out, x.reshape(out.shape), casting="same_kind")
