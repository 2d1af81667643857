"""Random generator kernels: RandomUniform(Like), RandomNormal(Like), Bernoulli and Multinomial.

A node with a ``seed`` gets its own numpy Generator, seeded on the node's first run and going
on from there on later runs (as onnxruntime keeps one per node): a freshly loaded program gives
the same sequence every time. Without a seed each run draws fresh values. No seed reproduces
another runtime's values.
"""

from __future__ import annotations

import weakref

import ml_dtypes
import numpy as np

from offload.ir import DataType

from . import kernel
from ._util import check_result, unsupported

_FLOATS = {np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64)}
_SEEDED = weakref.WeakKeyDictionary()  # seeded operation -> its Generator


def _generator(ctx, seed) -> np.random.Generator:
    if seed is None:
        return np.random.default_rng()
    rng = _SEEDED.get(ctx.op)
    if rng is None:
        # Every bit of the float seed goes into the generator's seed sequence.
        rng = _SEEDED[ctx.op] = np.random.default_rng(np.frombuffer(np.float64(seed).tobytes(), np.uint32))
    return rng


def _float_type(op: str, dtype, fallback) -> np.dtype:
    dt = DataType(dtype).numpy if dtype is not None else np.dtype(fallback)
    if dt not in _FLOATS:
        raise unsupported(op, f"dtype {dt}")
    return dt


def _uniform(ctx, shape, dtype, low, high, seed) -> np.ndarray:
    check_result(shape, np.float64, "RandomUniform")
    return _generator(ctx, seed).uniform(low, high, size=shape).astype(dtype)


def _normal(ctx, shape, dtype, mean, scale, seed) -> np.ndarray:
    check_result(shape, np.float64, "RandomNormal")
    return _generator(ctx, seed).normal(mean, scale, size=shape).astype(dtype)


@kernel("RandomUniform")
def random_uniform(ctx, *, dtype, high, low, seed, shape):
    dt = _float_type("RandomUniform", dtype, np.float32)
    return _uniform(ctx, tuple(shape), dt, low, high, seed)


@kernel("RandomUniformLike")
def random_uniform_like(ctx, input, *, dtype, high, low, seed):
    dt = _float_type("RandomUniformLike", dtype, input.dtype)
    return _uniform(ctx, input.shape, dt, low, high, seed)


@kernel("RandomNormal")
def random_normal(ctx, *, dtype, mean, scale, seed, shape):
    dt = _float_type("RandomNormal", dtype, np.float32)
    return _normal(ctx, tuple(shape), dt, mean, scale, seed)


@kernel("RandomNormalLike")
def random_normal_like(ctx, input, *, dtype, mean, scale, seed):
    dt = _float_type("RandomNormalLike", dtype, input.dtype)
    return _normal(ctx, input.shape, dt, mean, scale, seed)


@kernel("Bernoulli")
def bernoulli(ctx, input, *, dtype, seed):
    out = DataType(dtype).numpy if dtype is not None else input.dtype
    draws = _generator(ctx, seed).random(size=input.shape)
    return (draws < input.astype(np.float64)).astype(out)


@kernel("Multinomial")
def multinomial(ctx, input, *, dtype, sample_size, seed):
    out = DataType(dtype).numpy
    if out not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise unsupported("Multinomial", f"dtype {out}")
    if input.ndim != 2:
        raise unsupported("Multinomial", f"an input of rank {input.ndim} (must be [batch, classes])")
    # Rows are unnormalized log-probabilities: sample from their softmax by inverting the CDF.
    logits = input.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    draws = _generator(ctx, seed).random(size=(input.shape[0], sample_size))
    picks = np.empty(draws.shape, dtype=out)
    for row in range(input.shape[0]):
        picks[row] = np.searchsorted(cdf[row], draws[row], side="right").clip(max=input.shape[1] - 1)
    return picks
