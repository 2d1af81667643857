"""Elementwise kernels with numpy broadcasting: arithmetic, comparison, logic, activations."""

from __future__ import annotations

import numpy as np

from . import kernel


def _same(x, y):
    """numpy's result cast back to the input's element type (ONNX keeps the dtype)."""
    return np.asarray(y).astype(np.asarray(x).dtype, copy=False)


@kernel("Add")
def add(ctx, A, B):
    return _same(A, np.add(A, B))


@kernel("Sub")
def sub(ctx, A, B):
    return _same(A, np.subtract(A, B))


@kernel("Mul")
def mul(ctx, A, B):
    return _same(A, np.multiply(A, B))


@kernel("Relu")
def relu(ctx, X):
    return _same(X, np.maximum(X, 0))


@kernel("Identity")
def identity(ctx, input):
    return input
