"""Inference rules of shape manipulation: reshapes, slices, gathers, pads, shape ops."""

from __future__ import annotations

import math

import numpy as np

from .infer_dims import (
    _attr_dtype,
    _axis,
    _dims_value,
    _dtype,
    _input,
    _ints_value,
    _length,
    _merge_dim,
    _product,
    _shape,
    _tensor,
    _tt,
    _type,
    _unknown_dims,
    broadcast_shapes,
    value_of,
)
from .registry import inference
from .types import DataType, Dim, TensorType


def _reshape_dims(shape, target: list, allowzero: bool) -> tuple[Dim, ...]:
    """The output shape of Reshape; 0 copies (unless allowzero) and one -1 takes the rest."""
    out: list = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            d = shape[i] if shape is not None and i < len(shape) else None
        out.append(d)
    if -1 in out:
        out[out.index(-1)] = _rest_dim(shape, [d for d in out if d != -1])
    return tuple(out)


def _rest_dim(shape, others: list) -> Dim:
    """What a -1 must be so that ``others`` and it hold as many elements as ``shape``."""
    if shape is None or None in shape or None in others:
        return None
    total = [d for d in shape if d != 1]
    rest = [d for d in others if d != 1]
    for sym in [d for d in rest if isinstance(d, str)]:  # equal symbols on both sides cancel
        if sym not in total:
            return None
        total.remove(sym)
        rest.remove(sym)
    known = math.prod(rest)
    left_syms = [d for d in total if isinstance(d, str)]
    left = math.prod(d for d in total if isinstance(d, int))
    if not left_syms:
        return left // known if known and left % known == 0 else None
    return left_syms[0] if len(left_syms) == 1 and left == known else None


@inference("Reshape")
def _reshape(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    target = _dims_value(op, 1)
    if target is None:
        return [TensorType(t.dtype, _unknown_dims(_length(op, 1)))]
    return [TensorType(t.dtype, _reshape_dims(t.shape, target, bool(attrs.get("allowzero"))))]


@inference("Flatten")
def _flatten(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [None if t is None else TensorType(t.dtype, (None, None))]
    axis = attrs.get("axis", 1)
    axis = axis + len(t.shape) if axis < 0 else axis
    return [TensorType(t.dtype, (_product(t.shape[:axis]), _product(t.shape[axis:])))]


@inference("Squeeze")
def _squeeze(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    if _input(op, 1) is None:
        if not all(isinstance(d, int) for d in t.shape):
            return [TensorType(t.dtype, None)]  # which symbolic dims are 1 is unknown
        return [TensorType(t.dtype, tuple(d for d in t.shape if d != 1))]
    axes = _ints_value(op, 1)
    if axes is None:
        n = _length(op, 1)
        return [TensorType(t.dtype, None if n is None else _unknown_dims(len(t.shape) - n))]
    drop = {_axis(a, len(t.shape)) for a in axes}
    return [TensorType(t.dtype, tuple(d for i, d in enumerate(t.shape) if i not in drop))]


@inference("Unsqueeze")
def _unsqueeze(op, attrs):
    t = _tensor(op, 0)
    axes = _ints_value(op, 1)
    if t is None or t.shape is None:
        return [t]
    if axes is None:
        n = _length(op, 1)
        return [TensorType(t.dtype, None if n is None else _unknown_dims(len(t.shape) + n))]
    rank = len(t.shape) + len(axes)
    ones = {_axis(a, rank) for a in axes}
    rest = iter(t.shape)
    return [TensorType(t.dtype, tuple(1 if i in ones else next(rest) for i in range(rank)))]


@inference("Transpose")
def _transpose(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    perm = attrs.get("perm") or list(range(len(t.shape)))[::-1]
    return [TensorType(t.dtype, tuple(t.shape[p] for p in perm))]


@inference("Concat")
def _concat(op, attrs):
    types = [_tensor(op, i) for i in range(len(op.inputs))]
    dtype = next((t.dtype for t in types if t is not None), None)
    shapes = [None if t is None else t.shape for t in types]
    ranked = [s for s in shapes if s is not None]
    if not ranked:
        return [_tt(dtype, None)]
    rank = len(ranked[0])
    axis = _axis(attrs.get("axis", 0), rank)
    if axis is None or any(len(s) != rank for s in ranked):
        return [_tt(dtype, None)]
    out = []
    for i in range(rank):
        if i == axis:
            sizes = [None if s is None else s[i] for s in shapes]
            out.append(sum(sizes) if all(isinstance(d, int) for d in sizes) else None)
        else:
            dim = ranked[0][i]
            for s in ranked[1:]:
                dim = _merge_dim(dim, s[i])
            out.append(dim)
    return [_tt(dtype, out)]


@inference("Split")
def _split(op, attrs):
    t = _tensor(op, 0)
    n = len(op.outputs)
    if t is None or t.shape is None:
        return [t] * n
    axis = _axis(attrs.get("axis", 0), len(t.shape))
    if axis is None:
        return [TensorType(t.dtype, None)] * n
    return [
        TensorType(t.dtype, t.shape[:axis] + (d,) + t.shape[axis + 1 :])
        for d in _split_sizes(op, t.shape[axis], n)
    ]


def _split_sizes(op, dim: Dim, n: int) -> list[Dim]:
    """Sizes of the pieces: the ``split`` input, or ``n`` near-equal pieces (the last smaller)."""
    if _input(op, 1) is not None:
        sizes = _ints_value(op, 1)
        return sizes if sizes is not None and len(sizes) == n else [None] * n
    if not isinstance(dim, int):
        return [None] * n
    each = -(-dim // n)
    return [each] * (n - 1) + [dim - each * (n - 1)]


def _slice_len(dim: Dim, start: int, end: int, step: int) -> Dim:
    # ONNX clamps starts and ends exactly as Python slices do.
    if not isinstance(dim, int) or step == 0:
        return None
    return len(range(*slice(start, end, step).indices(dim)))


@inference("Slice")
def _slice(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    starts, ends = _ints_value(op, 1), _ints_value(op, 2)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(len(starts or [])))
    steps = _ints_value(op, 4) if _input(op, 4) is not None else [1] * len(starts or [])
    if starts is None or ends is None or axes is None or steps is None:
        if axes is not None and _input(op, 3) is not None:  # only the sliced axes are unknown
            sliced = {_axis(a, rank) for a in axes}
            return [TensorType(t.dtype, tuple(None if i in sliced else d for i, d in enumerate(t.shape)))]
        return [TensorType(t.dtype, (None,) * rank)]
    out = list(t.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = _axis(axis, rank)
        if a is None:
            return [TensorType(t.dtype, (None,) * rank)]
        out[a] = _slice_len(t.shape[a], start, end, step)
    return [TensorType(t.dtype, tuple(out))]


@inference("Gather")
def _gather(op, attrs):
    data, idx, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    if data is None or idx is None:
        return [_tt(dtype, None)]
    axis = _axis(attrs.get("axis", 0), len(data))
    if axis is None:
        return [_tt(dtype, None)]
    return [_tt(dtype, data[:axis] + tuple(idx) + data[axis + 1 :])]


@inference("GatherElements")
def _gather_elements(op, attrs):
    return [_tt(_dtype(op, 0), _shape(op, 1))]


@inference("GatherND")
def _gather_nd(op, attrs):
    data, idx, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    b = attrs.get("batch_dims", 0)
    if data is None or idx is None or not idx or not isinstance(idx[-1], int):
        return [_tt(dtype, None)]
    return [_tt(dtype, tuple(idx[:-1]) + tuple(data[b + idx[-1] :]))]


@inference("Expand")
def _expand(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    target = _dims_value(op, 1)
    if target is None:
        n = _length(op, 1)
        if n is None:
            return [TensorType(t.dtype, None)]
        target = [None] * n
    return [TensorType(t.dtype, broadcast_shapes(t.shape, tuple(target)))]


@inference("Tile")
def _tile(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    reps = _ints_value(op, 1)
    if reps is None or len(reps) != len(t.shape):
        return [TensorType(t.dtype, (None,) * len(t.shape))]
    return [
        TensorType(
            t.dtype,
            tuple(d * r if isinstance(d, int) else (d if r == 1 else None) for d, r in zip(t.shape, reps)),
        )
    ]


@inference("Pad")
def _pad(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    pads = _ints_value(op, 1)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(rank))
    if pads is None or axes is None or len(pads) != 2 * len(axes):
        return [TensorType(t.dtype, (None,) * rank)]
    out = list(t.shape)
    for j, axis in enumerate(axes):
        a = _axis(axis, rank)
        if a is None:
            return [TensorType(t.dtype, (None,) * rank)]
        grow = pads[j] + pads[j + len(axes)]
        out[a] = out[a] + grow if isinstance(out[a], int) else (out[a] if grow == 0 else None)
    return [TensorType(t.dtype, tuple(out))]


@inference("CenterCropPad")
def _center_crop_pad(op, attrs):
    t = _tensor(op, 0)
    target = _dims_value(op, 1)
    if t is None or t.shape is None or target is None:
        return [None if t is None else TensorType(t.dtype, None)]
    axes = attrs.get("axes") or list(range(len(t.shape)))
    out = list(t.shape)
    for a, d in zip(axes, target):
        if _axis(a, len(out)) is not None:
            out[_axis(a, len(out))] = d
    return [TensorType(t.dtype, tuple(out))]


def _shape_range(rank: int, attrs) -> tuple[int, int]:
    """Shape's [start, end) after clamping negatives and overruns to [0, rank]."""

    def clamp(x):
        x = x + rank if x < 0 else x
        return min(max(x, 0), rank)

    end = attrs.get("end")
    return clamp(attrs.get("start") or 0), clamp(rank if end is None else end)


@inference("Shape")
def _shape_op(op, attrs):
    s = _shape(op, 0)
    if _type(op, 0) is None or s is None:
        return [_tt(DataType.INT64, (None,))]
    start, end = _shape_range(len(s), attrs)
    return [TensorType(DataType.INT64, (max(end - start, 0),))]


@inference("Size")
def _size(op, attrs):
    return [TensorType(DataType.INT64, ())]


@inference("ConstantOfShape")
def _constant_of_shape(op, attrs):
    value = attrs.get("value")
    dtype = DataType.from_numpy(value.dtype) if isinstance(value, np.ndarray) else DataType.FLOAT
    dims = _dims_value(op, 0)
    if dims is None:
        dims = _unknown_dims(_length(op, 0))
    return [_tt(dtype, dims)]


@inference("Constant")
def _constant(op, attrs):
    for key in ("value", "sparse_value"):
        if isinstance(attrs.get(key), np.ndarray):
            a = attrs[key]
            return [TensorType(DataType.from_numpy(a.dtype), a.shape)]
    scalar = {
        "value_float": (DataType.FLOAT, ()),
        "value_int": (DataType.INT64, ()),
        "value_string": (DataType.STRING, ()),
    }
    for key, (dtype, shape) in scalar.items():
        if attrs.get(key) is not None:
            return [TensorType(dtype, shape)]
    vector = {"value_floats": DataType.FLOAT, "value_ints": DataType.INT64, "value_strings": DataType.STRING}
    for key, dtype in vector.items():
        if attrs.get(key) is not None:
            return [TensorType(dtype, (len(attrs[key]),))]
    return [None]


@inference("Range")
def _range(op, attrs):
    dtype = _dtype(op, 0)
    vals = [value_of(_input(op, i)) for i in range(3)]
    if any(v is None or v.size != 1 for v in vals):
        return [_tt(dtype, (None,))]
    start, limit, delta = (v.reshape(-1)[0].item() for v in vals)
    if delta == 0:
        return [_tt(dtype, (None,))]
    return [_tt(dtype, (max(math.ceil((limit - start) / delta), 0),))]


@inference("BlackmanWindow", "HammingWindow", "HannWindow")
def _window(op, attrs):
    size = _ints_value(op, 0)
    dtype = _attr_dtype(attrs.get("output_datatype"), DataType.FLOAT)
    return [_tt(dtype, (size[0] if size and len(size) == 1 else None,))]


@inference("Resize")
def _resize(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    axes = [_axis(a, rank) for a in (attrs.get("axes") or range(rank))]
    out = list(t.shape)
    sizes = _ints_value(op, 3) if _input(op, 3) is not None else None
    scales = value_of(_input(op, 2)) if _input(op, 2) is not None else None
    if sizes is not None and len(sizes) == len(axes):
        out = _resize_to_sizes(out, axes, sizes, attrs.get("keep_aspect_ratio_policy", "stretch"))
    elif scales is not None and scales.size == len(axes):
        for a, s in zip(axes, scales.reshape(-1).tolist()):
            out[a] = math.floor(out[a] * s) if isinstance(out[a], int) else None
    else:
        out = [None] * rank
    return [TensorType(t.dtype, tuple(out))]


def _resize_to_sizes(out: list, axes: list, sizes: list[int], policy: str) -> list:
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            out[a] = s
        return out
    if not all(isinstance(out[a], int) and out[a] > 0 for a in axes):
        return [None if a in axes else d for a, d in enumerate(out)]
    ratios = [s / out[a] for a, s in zip(axes, sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        out[a] = math.floor(out[a] * scale + 0.5)
    return out


@inference("OneHot")
def _one_hot(op, attrs):
    idx, dtype = _shape(op, 0), _dtype(op, 2)
    depth = value_of(_input(op, 1))
    if idx is None:
        return [_tt(dtype, None)]
    rank = len(idx) + 1
    axis = _axis(attrs.get("axis", -1), rank)
    d = int(depth.reshape(-1)[0]) if depth is not None and depth.size == 1 else None
    if axis is None:
        return [_tt(dtype, None)]
    return [_tt(dtype, tuple(idx[:axis]) + (d,) + tuple(idx[axis:]))]


@inference("NonZero")
def _nonzero(op, attrs):
    s = _shape(op, 0)
    return [_tt(DataType.INT64, (None if s is None else len(s), None))]


@inference("Compress")
def _compress(op, attrs):
    s, axis = _shape(op, 0), attrs.get("axis")
    if axis is None or s is None:
        return [_tt(_dtype(op, 0), (None,) if axis is None else None)]
    a = _axis(axis, len(s))
    return [_tt(_dtype(op, 0), None if a is None else s[:a] + (None,) + s[a + 1 :])]


@inference("Unique")
def _unique(op, attrs):
    s, axis, dtype = _shape(op, 0), attrs.get("axis"), _dtype(op, 0)
    if axis is None or s is None:
        y = (None,) if axis is None else None
    else:
        a = _axis(axis, len(s))
        y = None if a is None else s[:a] + (None,) + s[a + 1 :]
    return [_tt(dtype, y)] + [_tt(DataType.INT64, (None,))] * 3


@inference("NonMaxSuppression")
def _nms(op, attrs):
    return [TensorType(DataType.INT64, (None, 3))]


@inference("StringSplit")
def _string_split(op, attrs):
    s = _shape(op, 0)
    return [_tt(DataType.STRING, None if s is None else s + (None,)), _tt(DataType.INT64, s)]
