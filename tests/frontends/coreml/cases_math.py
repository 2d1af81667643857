"""Single-op cases: elementwise math, activations, reductions, linear algebra, convolution,
pooling, normalization (generate_ops.py; needs coremltools)."""

from __future__ import annotations

import math

import numpy as np
from coremltools.converters.mil import Builder as mb
from generate_ops import Case

rng = np.random.default_rng(1234)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64)).astype(x.dtype)


def pool2d(x, k, s, pads, kind, exclude=False):
    """NCHW pooling; pads = (top, bottom, left, right); padded cells never win a max and, with
    ``exclude``, do not count in an average."""
    n, c, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]), constant_values=fill)
    inside = np.pad(np.ones((h, w)), (pads[:2], pads[2:]))
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s : i * s + k, j * s : j * s + k]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                count = inside[i * s : i * s + k, j * s : j * s + k].sum() if exclude else k * k
                out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


X = randn(2, 3, 4)
W54, B5 = randn(5, 4), randn(5)
Y = randn(2, 3, 4)
POS = np.abs(randn(2, 3, 4)) + 0.1
IMG = randn(1, 3, 8, 8)

CASES = [
    Case("add", {"x": X, "y": Y}, lambda x, y: mb.add(x=x, y=y), lambda x, y: [x + y]),
    Case("real_div", {"x": X, "y": POS}, lambda x, y: mb.real_div(x=x, y=y), lambda x, y: [x / y]),
    Case(
        "mod",
        {"x": X, "y": POS},
        lambda x, y: mb.mod(x=x, y=y),
        lambda x, y: [np.mod(x, y)],
    ),
    Case(
        "floor_div",
        {"x": X, "y": POS},
        lambda x, y: mb.floor_div(x=x, y=y),
        lambda x, y: [np.floor_divide(x, y)],
    ),
    Case("log_eps", {"x": POS}, lambda x: mb.log(x=x, epsilon=0.5), lambda x: [np.log(x + 0.5)]),
    Case("rsqrt", {"x": POS}, lambda x: mb.rsqrt(x=x, epsilon=0.25), lambda x: [1 / np.sqrt(x + 0.25)]),
    Case("inverse", {"x": POS}, lambda x: mb.inverse(x=x, epsilon=0.5), lambda x: [1 / (x + 0.5)]),
    Case(
        "gelu_exact",
        {"x": X},
        lambda x: mb.gelu(x=x, mode="EXACT"),
        lambda x: [0.5 * x * (1 + erf(x / np.sqrt(2)))],
        tolerance=1e-5,
    ),
    Case(
        "gelu_tanh",
        {"x": X},
        lambda x: mb.gelu(x=x, mode="TANH_APPROXIMATION"),
        lambda x: [0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))],
    ),
    Case(
        "gelu_sigmoid",
        {"x": X},
        lambda x: mb.gelu(x=x, mode="SIGMOID_APPROXIMATION"),
        lambda x: [x / (1 + np.exp(-1.702 * x))],
    ),
    Case(
        "clamped_relu",
        {"x": X},
        lambda x: mb.clamped_relu(x=x, alpha=0.2, beta=0.5),
        lambda x: [np.minimum(np.where(x >= 0, x, 0.2 * x), 0.5)],
    ),
    Case(
        "softmax",
        {"x": X},
        lambda x: mb.softmax(x=x, axis=1),
        lambda x: [np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)],
    ),
    Case(
        "reduce_mean_keep",
        {"x": X},
        lambda x: mb.reduce_mean(x=x, axes=[0, 2], keep_dims=True),
        lambda x: [x.mean(axis=(0, 2), keepdims=True)],
    ),
    Case(
        "reduce_argmax",
        {"x": X},
        lambda x: mb.reduce_argmax(x=x, axis=1),
        lambda x: [np.argmax(x, axis=1).astype(np.int32)],
    ),
    Case(
        "linear_3d",
        {"x": X},
        lambda x: mb.linear(x=x, weight=W54, bias=B5),
        lambda x: [x @ W54.T + B5],
    ),
    Case(
        "matmul_transpose_y",
        {"x": X, "y": randn(2, 5, 4)},
        lambda x, y: mb.matmul(x=x, y=y, transpose_y=True),
        lambda x, y: [x @ np.swapaxes(y, -1, -2)],
    ),
    Case(
        "layer_norm_last",
        {"x": X},
        lambda x: mb.layer_norm(x=x, axes=[-1], epsilon=1e-5),
        lambda x: [(x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)],
    ),
    Case(
        "layer_norm_middle",
        {"x": X},
        lambda x: mb.layer_norm(x=x, axes=[1], epsilon=1e-5),
        lambda x: [(x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)],
    ),
    Case(
        "max_pool_same",
        {"x": IMG},
        lambda x: mb.max_pool(x=x, kernel_sizes=[3, 3], strides=[2, 2], pad_type="same"),
        lambda x: [pool2d(x, 3, 2, (0, 1, 0, 1), "max")],
    ),
    Case(
        "avg_pool_exclude",
        {"x": IMG},
        lambda x: mb.avg_pool(
            x=x, kernel_sizes=[3, 3], strides=[1, 1], pad_type="custom", pad=[1, 1, 1, 1],
            exclude_padding_from_average=True,
        ),
        lambda x: [pool2d(x, 3, 1, (1, 1, 1, 1), "avg", exclude=True)],
    ),
]  # fmt: skip
