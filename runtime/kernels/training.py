"""Optimizer kernels (domain ai.onnx.preview.training): Adagrad, Adam and Momentum.

Each takes the learning rate R and update count T, then its tensors grouped by kind: all the
X's, then all their gradients G, then each per-tensor state (Adagrad: H; Adam: V, H;
Momentum: V). The outputs follow the same grouping: the new X's, then the new states.
"""

from __future__ import annotations

import numpy as np

from . import kernel
from ._util import unsupported

TRAINING = "ai.onnx.preview.training"


def _groups(op: str, inputs: tuple, kinds: int) -> list[tuple]:
    """The variadic inputs as one tuple (X, G, state...) per optimized tensor."""
    if not inputs or len(inputs) % kinds:
        raise unsupported(op, f"{len(inputs)} tensor inputs (must be a multiple of {kinds})")
    n = len(inputs) // kinds
    return [tuple(inputs[k * n + i] for k in range(kinds)) for i in range(n)]


def _regroup(per_tensor: list[tuple]) -> tuple:
    """Results computed per tensor, reordered as the outputs list them: by kind, then tensor."""
    return tuple(r for kind in zip(*per_tensor) for r in kind)


def _scalar(v) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


@kernel("Adagrad", domain=TRAINING)
def adagrad(ctx, R, T, *inputs, decay_factor, epsilon, norm_coefficient):
    r = _scalar(R) / (1 + _scalar(T) * decay_factor)
    results = []
    for X, G, H in _groups("Adagrad", inputs, 3):
        x, g, h = _f64(X, G, H)
        g = norm_coefficient * x + g
        h_new = h + g * g
        x_new = x - r * g / (np.sqrt(h_new) + epsilon)
        results.append((x_new.astype(X.dtype), h_new.astype(H.dtype)))
    return _regroup(results)


@kernel("Adam", domain=TRAINING)
def adam(ctx, R, T, *inputs, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post):
    t = _scalar(T)
    r = _scalar(R)
    if t > 0:  # bias correction of both running averages
        r = r * np.sqrt(1 - beta**t) / (1 - alpha**t)
    results = []
    for X, G, V, H in _groups("Adam", inputs, 4):
        x, g, v, h = _f64(X, G, V, H)
        g = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g
        h_new = beta * h + (1 - beta) * g * g
        x_new = (x - r * v_new / (np.sqrt(h_new) + epsilon)) * (1 - norm_coefficient_post)
        results.append((x_new.astype(X.dtype), v_new.astype(V.dtype), h_new.astype(H.dtype)))
    return _regroup(results)


@kernel("Momentum", domain=TRAINING)
def momentum(ctx, R, T, *inputs, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        raise unsupported("Momentum", f"mode '{mode}'")
    r = _scalar(R)
    beta_adjusted = beta if _scalar(T) > 0 else 1.0  # the first update takes the whole gradient
    results = []
    for X, G, V in _groups("Momentum", inputs, 3):
        x, g, v = _f64(X, G, V)
        g = norm_coefficient * x + g
        v_new = alpha * v + beta_adjusted * g
        step = g + alpha * v_new if mode == "nesterov" else v_new
        results.append(((x - r * step).astype(X.dtype), v_new.astype(V.dtype)))
    return _regroup(results)
