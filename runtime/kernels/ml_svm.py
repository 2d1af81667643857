"""ai.onnx.ml SVMRegressor and SVMClassifier: support-vector (or linear) models over LINEAR,
POLY, RBF or SIGMOID kernels.

kernel_params is [gamma, coef0, degree]; the kernels are x.s (LINEAR), (gamma x.s + coef0)^degree
(POLY), exp(-gamma |x - s|^2) (RBF) and tanh(gamma x.s + coef0) (SIGMOID). With n_supports > 0
the score is the coefficients' sum over the kernels of x with each support vector, plus rho[0];
with none it is x.coefficients + rho[0]. one_class turns it into +1 / -1 by its sign. As in
onnxruntime (tests/runtime/test_ml_svm.py), the regressor applies no post_transform.

SVMClassifier with support vectors (vectors_per_class) is one-vs-one: a score per class pair
(i, j), i < j, from the coefficients of both classes' vectors plus that pair's rho; the pair
votes for i where its score is positive, else for j, and the label is the class of most votes
(the first on a tie). The scores are the pair scores, or, with prob_a / prob_b, class
probabilities: each pair's Platt probability, coupled by the iterative method of Wu, Lin and
Weng (2004) as libsvm does. Without support vectors it is linear: a score per class,
x.coefficients + rho[0], the label the best class. Two-class models follow onnxruntime's choices
(see _binary).
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported
from .ml import ML
from .ml_linear import _rows, _transform


def _kernel(op: str, kind: str, params, x: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """[N, vectors] kernel values of the rows of x with each support vector."""
    gamma, coef0, degree = (list(params or []) + [0.0, 0.0, 0.0])[:3]
    if kind == "RBF":
        gaps = x[:, None, :].astype(np.float64) - vectors[None, :, :]
        return np.exp(-gamma * (gaps * gaps).sum(axis=2))
    dots = x.astype(np.float64) @ vectors.T.astype(np.float64)
    if kind == "LINEAR":
        return dots
    if kind == "POLY":
        return (gamma * dots + coef0) ** degree
    if kind == "SIGMOID":
        return np.tanh(gamma * dots + coef0)
    raise unsupported(op, f"kernel_type '{kind}'")


@kernel("SVMRegressor", domain=ML)
def svm_regressor(
    ctx, X, *, coefficients, kernel_params, kernel_type, n_supports, one_class, rho, support_vectors, **_
):
    op = "SVMRegressor"
    x = _rows(op, X)
    coef = np.asarray(coefficients or [], np.float64)
    if not rho or not len(coef):
        raise unsupported(op, "a model without coefficients and rho")
    if n_supports > 0:
        vectors = np.asarray(support_vectors or [], np.float64)
        if vectors.size != n_supports * x.shape[1] or len(coef) < n_supports:
            raise unsupported(
                op,
                f"{vectors.size} support vector values and {len(coef)} coefficients for "
                f"{n_supports} vectors of {x.shape[1]} features",
            )
        y = _kernel(op, kernel_type, kernel_params, x, vectors.reshape(n_supports, -1)) @ coef[:n_supports]
    else:
        if len(coef) != x.shape[1]:
            raise unsupported(op, f"{len(coef)} coefficients for inputs of {x.shape[1]} features")
        y = x.astype(np.float64) @ coef
    y = y + rho[0]
    if one_class:
        y = np.where(y > 0, 1.0, -1.0)
    return y.astype(np.float32).reshape(-1, 1)


def _pair_scores(x_kernels, coef, rho, counts) -> np.ndarray:
    """[N, pairs] one-vs-one scores; coef is [classes - 1, vectors] (libsvm's layout)."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    scores = []
    classes = len(counts)
    for i in range(classes - 1):
        si = slice(starts[i], starts[i] + counts[i])
        for j in range(i + 1, classes):
            sj = slice(starts[j], starts[j] + counts[j])
            scores.append(x_kernels[:, si] @ coef[j - 1, si] + x_kernels[:, sj] @ coef[i, sj])
    return np.stack(scores, axis=1) + np.asarray(rho[: len(scores)], np.float64)


def _coupled(pair_probability: np.ndarray, classes: int) -> np.ndarray:
    """Class probabilities from pairwise ones (r[i, j] = P(i | i or j)), by the fixed-point
    iteration of Wu, Lin and Weng's second method, stopping as libsvm does."""
    out = np.empty((len(pair_probability), classes))
    eps = 0.005 / classes
    for row, r in zip(out, pair_probability):
        q = -r.T * r
        np.fill_diagonal(q, 0.0)
        np.fill_diagonal(q, (r.T**2).sum(axis=1) - np.diag(r) ** 2)
        p = np.full(classes, 1.0 / classes)
        for _ in range(100):
            qp = q @ p
            pqp = p @ qp
            if np.abs(qp - pqp).max() < eps:
                break
            for t in range(classes):
                diff = (pqp - qp[t]) / q[t, t]
                p[t] += diff
                pqp = (pqp + diff * (diff * q[t, t] + 2 * qp[t])) / (1 + diff) ** 2
                qp = (qp + diff * q[t]) / (1 + diff)
                p /= 1 + diff
        row[:] = p
    return out


def _binary(scores, votes, linear: bool, all_positive: bool, labels, post_transform: str):
    """A two-class model's labels and [N, 2] scores, as onnxruntime writes them: the linear form
    takes the second class where its best score passes 0.5 (all coefficients >= 0) or 0 (some
    negative), the first best score's class otherwise; the one-vs-one form takes the class of
    most votes and writes its single score s as [-s, s] without post_transform, [1 - t, t] with
    one (t the LOGISTIC or PROBIT of s, or s itself under a softmax)."""
    if linear:
        best = scores.max(axis=1)
        second = best >= 0.5 if all_positive else best > 0
        label = labels[np.where(second, 1, np.argmax(scores, axis=1))]
        return label, _transform("SVMClassifier", scores.astype(np.float32), post_transform)
    label = labels[np.argmax(votes, axis=1)]
    s = scores.astype(np.float32)
    if post_transform == "NONE":
        return label, np.concatenate([-s, s], axis=1)
    # a single column takes no softmax; onnxruntime leaves the second column of PROBIT unwritten
    t = 1 / (1 + np.exp(-s.astype(np.float64))) if post_transform == "LOGISTIC" else s
    t = _transform("SVMClassifier", t.astype(np.float32), post_transform)
    return label, np.concatenate([1 - t, t], axis=1)


@kernel("SVMClassifier", domain=ML)
def svm_classifier(
    ctx,
    X,
    *,
    classlabels_ints,
    classlabels_strings,
    coefficients,
    kernel_params,
    kernel_type,
    post_transform,
    prob_a,
    prob_b,
    rho,
    support_vectors,
    vectors_per_class,
):
    op = "SVMClassifier"
    x = _rows(op, X)
    labels = np.asarray(classlabels_strings, object) if classlabels_strings else None
    if labels is None:
        labels = np.asarray(classlabels_ints or [], np.int64)
    classes = len(labels)
    coef = np.asarray(coefficients or [], np.float64)
    if classes < 2 or not rho or not len(coef):
        raise unsupported(op, f"a model of {classes} class labels without coefficients and rho")
    counts = np.asarray(vectors_per_class or [], np.int64)
    if not len(counts):  # linear
        if len(coef) != classes * x.shape[1]:
            raise unsupported(op, f"{len(coef)} coefficients for {classes} classes of {x.shape[1]} features")
        scores = x.astype(np.float64) @ coef.reshape(classes, -1).T + rho[0]
        if classes == 2:
            return _binary(scores, None, True, bool((coef >= 0).all()), labels, post_transform)
        return labels[np.argmax(scores, axis=1)], _transform(op, scores.astype(np.float32), post_transform)
    vectors = int(counts.sum())
    pairs = classes * (classes - 1) // 2
    sv = np.asarray(support_vectors or [], np.float64)
    if len(counts) != classes or not vectors or sv.size != vectors * x.shape[1]:
        raise unsupported(
            op, f"{len(counts)} vectors_per_class and {sv.size} support vector values for {classes} classes"
        )
    if len(coef) < (classes - 1) * vectors or len(rho) < pairs:
        raise unsupported(
            op, f"{len(coef)} coefficients and {len(rho)} rho for {classes} classes of {vectors} vectors"
        )
    kernels = _kernel(op, kernel_type, kernel_params, x, sv.reshape(vectors, -1))
    scores = _pair_scores(kernels, coef[: (classes - 1) * vectors].reshape(classes - 1, vectors), rho, counts)
    winners = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    votes = np.zeros((len(x), classes), np.int64)
    for k, (i, j) in enumerate(winners):
        np.add.at(votes, (np.arange(len(x)), np.where(scores[:, k] > 0, i, j)), 1)
    if prob_a:
        a, b = np.asarray(prob_a, np.float64), np.asarray(prob_b or [], np.float64)
        if len(a) < pairs or len(b) < pairs:
            raise unsupported(op, f"{len(a)} prob_a and {len(b)} prob_b for {pairs} class pairs")
        p = np.clip(1 / (1 + np.exp(scores * a[:pairs] + b[:pairs])), 1e-7, 1 - 1e-7)
        r = np.zeros((len(x), classes, classes))
        for k, (i, j) in enumerate(winners):
            r[:, i, j], r[:, j, i] = p[:, k], 1 - p[:, k]
        probabilities = _coupled(r, classes)
        return labels[np.argmax(votes, axis=1)], _transform(
            op, probabilities.astype(np.float32), post_transform
        )
    if classes == 2:
        return _binary(scores, votes, False, False, labels, post_transform)
    return labels[np.argmax(votes, axis=1)], _transform(op, scores.astype(np.float32), post_transform)
