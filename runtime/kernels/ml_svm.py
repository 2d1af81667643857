"""ai.onnx.ml SVMRegressor: a support-vector (or linear) regressor over LINEAR, POLY, RBF or
SIGMOID kernels.

kernel_params is [gamma, coef0, degree]; the kernels are x.s (LINEAR), (gamma x.s + coef0)^degree
(POLY), exp(-gamma |x - s|^2) (RBF) and tanh(gamma x.s + coef0) (SIGMOID). With n_supports > 0
the score is the coefficients' sum over the kernels of x with each support vector, plus rho[0];
with none it is x.coefficients + rho[0]. one_class turns it into +1 / -1 by its sign. As in
onnxruntime (tests/runtime/test_ml_svm.py), post_transform is not applied.
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported
from .ml import ML
from .ml_linear import _rows


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
