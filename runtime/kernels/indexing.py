"""Indexing kernels: gathers, scatters, selections by mask or value, one-hot and unique."""

from __future__ import annotations

import functools

import numpy as np

from . import kernel, prepared
from ._util import check_result, normalize_axis, unsupported


def _wrap(indices, dim: int) -> np.ndarray:
    """Indices as int64 with negative ones counted from the end of a dimension of ``dim``."""
    idx = np.asarray(indices).astype(np.int64)
    return np.where(idx < 0, idx + dim, idx)


# Element-wise combination of a scatter's update with what is already there.
_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(op: str, out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """``out[where] = updates``, or combined with ``reduction``; repeated targets accumulate."""
    if reduction == "none":
        out[where] = updates
    elif reduction in _REDUCTIONS:
        _REDUCTIONS[reduction].at(out, where, updates)
    else:
        raise unsupported(op, f"reduction '{reduction}'")
    return out


# ---- gathers ------------------------------------------------------------------------------------


@kernel("Gather")
def gather(ctx, data, indices, *, axis):
    axis = normalize_axis(axis, data.ndim, "Gather")
    return np.take(data, _wrap(indices, data.shape[axis]), axis=axis)


@prepared("Gather")
def _gather_prepared(attrs, inputs, output):
    if len(inputs) != 2 or any(s is None for s in inputs) or output is None:
        return None
    (dtype, shape), (idx_dtype, idx_shape) = inputs
    rank = len(shape)
    axis = int(attrs["axis"])
    if dtype != output[0] or dtype.kind == "O" or idx_dtype.kind not in "iu" or not -rank <= axis < rank:
        return None
    axis %= rank
    if (*shape[:axis], *idx_shape, *shape[axis + 1 :]) != tuple(output[1]):
        return None
    return _GatherCall(axis)


class _GatherCall:
    """Gather as the kernel's ``np.take`` of the wrapped indices, into the output's view; constant
    indices are wrapped once, when the call is bound (one index or a run of consecutive ones: a
    copy from the view of what they take, ``_picked``). Indices a run computes go to numpy's take
    as they are: it counts a negative index from the end as ``_wrap`` does, and raises on one out
    of range (the step then runs the kernel, which names the op), so the sizes an exported
    model gathers from Shape cost one call instead of five."""

    __slots__ = ("axis",)

    def __init__(self, axis: int):
        self.axis = axis

    def __call__(self, out, data, indices):
        data.take(indices, axis=self.axis, out=out)

    def bind(self, out, data, indices):
        if indices.flags.writeable:  # computed by the graph: wrapped at each call
            return functools.partial(self, out, data, indices)
        wrapped = _wrap(indices, data.shape[self.axis])
        picked = _picked(data, wrapped, self.axis)
        if picked is not None and picked.shape == out.shape:  # the same values, one copy
            return functools.partial(np.copyto, out, picked)
        return functools.partial(np.take, data, wrapped, axis=self.axis, out=out)


def _picked(data: np.ndarray, wrapped: np.ndarray, axis: int) -> np.ndarray | None:
    """What a Gather of constant indices takes from ``data``, as a view of it: one index (0-d
    indices, an exported model's ``state[0]``) or a run of consecutive ones (1-D), all within the
    dimension; None for others. np.take's call costs about 3 us of wrappers, a copy from the view
    0.5."""
    flat, dim = wrapped.reshape(-1), data.shape[axis]
    if wrapped.ndim > 1 or flat.size == 0 or flat.min() < 0 or flat.max() >= dim:
        return None
    head = (slice(None),) * axis
    first = int(flat[0])
    if wrapped.ndim == 0:  # a view: indexing by the integer would give a copy of a 1-D array's element
        return data[(*head, slice(first, first + 1))].squeeze(axis)
    if np.array_equal(flat, np.arange(first, first + flat.size)):
        return data[(*head, slice(first, first + flat.size))]
    return None


@kernel("GatherElements")
def gather_elements(ctx, data, indices, *, axis):
    axis = normalize_axis(axis, data.ndim, "GatherElements")
    return np.take_along_axis(data, _wrap(indices, data.shape[axis]), axis=axis)


@kernel("GatherND")
def gather_nd(ctx, data, indices, *, batch_dims):
    b = batch_dims
    k = indices.shape[-1]
    batch_shape = data.shape[:b]
    n_batch = int(np.prod(batch_shape, dtype=np.int64))
    # Fold the batch dimensions into one, and the index tuples into (batch, m, k).
    flat_data = data.reshape((n_batch,) + data.shape[b:])
    idx = np.asarray(indices, dtype=np.int64).reshape(n_batch, -1, k)
    idx = np.where(idx < 0, idx + np.array(data.shape[b : b + k]), idx)
    batch = np.arange(n_batch).reshape(-1, 1)
    picked = flat_data[(batch,) + tuple(idx[..., j] for j in range(k))]
    return picked.reshape(indices.shape[:-1] + data.shape[b + k :])


# ---- scatters -----------------------------------------------------------------------------------


@kernel("ScatterElements")
def scatter_elements(ctx, data, indices, updates, *, axis, reduction):
    axis = normalize_axis(axis, data.ndim, "ScatterElements")
    # Every other axis indexes with the update's own position.
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = _wrap(indices, data.shape[axis])
    return _scatter("ScatterElements", data.copy(), tuple(where), updates, reduction)


@kernel("ScatterND")
def scatter_nd(ctx, data, indices, updates, *, reduction):
    k = indices.shape[-1]
    where = tuple(_wrap(indices[..., j], data.shape[j]) for j in range(k))
    return _scatter("ScatterND", data.copy(), where, updates, reduction)


@kernel("TensorScatter")
def tensor_scatter(ctx, past_cache, update, write_indices=None, *, axis, mode):
    axis = normalize_axis(axis, past_cache.ndim, "TensorScatter")
    if axis == 0:
        raise unsupported("TensorScatter", "axis 0 (the batch dimension)")
    if mode not in ("linear", "circular"):
        raise unsupported("TensorScatter", f"mode '{mode}'")
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    start = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64)
    pos = start.reshape(-1, 1) + np.arange(seq_len)  # (batch, seq)
    if mode == "circular":
        pos %= max_len
    shape = [1] * past_cache.ndim
    shape[0], shape[axis] = batch, seq_len
    index = np.broadcast_to(pos.reshape(shape), update.shape)
    out = past_cache.copy()
    np.put_along_axis(out, index, update, axis=axis)
    return out


# ---- selections ---------------------------------------------------------------------------------


@kernel("Compress")
def compress(ctx, input, condition, *, axis):
    cond = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        return np.compress(cond, input.reshape(-1))
    return np.compress(cond, input, axis=normalize_axis(axis, input.ndim, "Compress"))


@kernel("NonZero")
def nonzero(ctx, X):
    if X.ndim == 0:
        return np.zeros((0, int(bool(X))), dtype=np.int64)
    return np.array(np.nonzero(X), dtype=np.int64).reshape(X.ndim, -1)


@kernel("OneHot")
def one_hot(ctx, indices, depth, values, *, axis):
    rank = np.ndim(indices) + 1
    axis = normalize_axis(axis, rank, "OneHot")
    n = int(np.asarray(depth).reshape(-1)[0])
    values = np.asarray(values)
    check_result(np.shape(indices) + (max(n, 0),), values.dtype, "OneHot")
    off, on = values.reshape(-1)[:2]
    # Indices outside [-depth, depth) match no class and give an all-off row.
    idx = _wrap(indices, n)
    hot = idx[..., None] == np.arange(n)
    out = np.where(hot, on, off).astype(values.dtype, copy=False)  # (of that type already)
    return out if axis == rank - 1 else np.moveaxis(out, -1, axis)


@kernel("Unique")
def unique(ctx, X, *, axis, sorted):
    if axis is None:
        data, ax = X.reshape(-1), 0
    else:
        data, ax = X, normalize_axis(axis, X.ndim, "Unique")
    y, first, inverse, counts = np.unique(
        data, return_index=True, return_inverse=True, return_counts=True, axis=ax
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Reorder to first occurrence; `rank` maps sorted positions to the new ones.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y, first, counts, inverse = np.take(y, order, axis=ax), first[order], counts[order], rank[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)
