"""ai.onnx.ml SVMRegressor (runtime/kernels/ml_svm.py), saved as a .pte and run by the CPU
executor, against onnxruntime."""

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
