"""Inference rules of reductions, ArgMax/ArgMin, TopK and losses."""

from __future__ import annotations

from .infer_dims import _axis, _dtype, _input, _ints_value, _length, _shape, _tensor, _tt, _unknown_dims
from .registry import inference
from .types import DataType, Dim, TensorType

REDUCE = [
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
]


def _reduced(shape, axes: list[int] | None, keepdims: bool) -> tuple[Dim, ...] | None:
    """``shape`` reduced over ``axes`` (None: every axis)."""
    if shape is None:
        return None
    rank = len(shape)
    chosen = set(range(rank)) if axes is None else {_axis(a, rank) for a in axes}
    if None in chosen:
        return None
    if keepdims:
        return tuple(1 if i in chosen else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in chosen)


@inference(*REDUCE)
def _reduce(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    keep = bool(attrs.get("keepdims", 1))
    if _input(op, 1) is None:
        axes = None
    else:
        axes = _ints_value(op, 1)
        n = _length(op, 1)
        if axes is None and t.shape is not None and (keep or n):  # unknown axes, known rank
            return [TensorType(t.dtype, _unknown_dims(len(t.shape) - (0 if keep else n)))]
        if axes is None:
            return [TensorType(t.dtype, None)]
    if axes is not None and not axes:
        axes = None
    if axes is None and attrs.get("noop_with_empty_axes"):
        return [t]
    return [TensorType(t.dtype, _reduced(t.shape, axes, keep))]


@inference("ArgMax", "ArgMin")
def _arg_reduce(op, attrs):
    s = _shape(op, 0)
    if _tensor(op, 0) is None:
        return [None]
    return [_tt(DataType.INT64, _reduced(s, [attrs.get("axis", 0)], bool(attrs.get("keepdims", 1))))]


@inference("TopK")
def _topk(op, attrs):
    s, dtype = _shape(op, 0), _dtype(op, 0)
    k = _ints_value(op, 1)
    shape = None
    if s is not None:
        axis = _axis(attrs.get("axis", -1), len(s))
        if axis is not None:
            shape = s[:axis] + (k[0] if k and len(k) == 1 else None,) + s[axis + 1 :]
    return [_tt(dtype, shape), _tt(DataType.INT64, shape)]


@inference("Det")
def _det(op, attrs):
    s = _shape(op, 0)
    return [_tt(_dtype(op, 0), None if s is None or len(s) < 2 else s[:-2])]


@inference("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(op, attrs):
    dtype, target = _dtype(op, 0), _shape(op, 1)
    shape = target if attrs.get("reduction", "mean") == "none" else ()
    return [_tt(dtype, shape), _tt(dtype, _shape(op, 0))][: len(op.outputs)]
