"""Folding small values (shape vectors) from known inputs, for inference and for ``fold_op``."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from .core import Operation, Value
from .infer_dims import MAX_FOLDED_ELEMENTS, _attr_dtype, _input, _ints_value, _shape, value_of
from .infer_tensor import _shape_range
from .registry import lookup
from .types import DataType, TensorType, ValueType

__all__ = ["FOLDABLE", "fold_op"]

_log = logging.getLogger(__name__)


def _shape_value(op, attrs):
    s = _shape(op, 0)
    if s is None:
        return None
    start, end = _shape_range(len(s), attrs)
    dims = s[start:end]
    if all(isinstance(d, int) for d in dims):
        return np.array(dims, dtype=np.int64)
    out = np.empty(len(dims), dtype=object)  # filled in place: np.array would make str dims text
    out[:] = dims
    return out


def _size_value(op, attrs):
    s = _shape(op, 0)
    if s is None or not all(isinstance(d, int) for d in s):
        return None
    return np.array(math.prod(s), dtype=np.int64)


def _cast_value(op, attrs, a):
    to = _attr_dtype(attrs.get("to"), None)
    if to is None:
        return None
    if a.dtype == object:  # partly symbolic dims stay dims through an integer cast
        return a if to in (DataType.INT64, DataType.INT32) else None
    return a.astype(to.numpy)


def _slice_value(op, attrs, a, *_):
    starts, ends = _ints_value(op, 1), _ints_value(op, 2)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(len(starts or [])))
    steps = _ints_value(op, 4) if _input(op, 4) is not None else [1] * len(starts or [])
    if None in (starts, ends, axes, steps) or 0 in steps:
        return None
    index = [slice(None)] * a.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[ax] = slice(s, e, st)
    return a[tuple(index)]


def _unsqueeze_value(op, attrs, a, axes):
    rank = a.ndim + axes.size
    for ax in sorted(int(x) + rank if x < 0 else int(x) for x in axes.reshape(-1)):
        a = np.expand_dims(a, ax)
    return a


def _squeeze_value(op, attrs, a, *axes):
    return np.squeeze(a, axis=tuple(axes[0].reshape(-1).tolist())) if axes else np.squeeze(a)


def _as_output_shape(op, a):
    """``a`` laid out in the (static) inferred shape of op's first output."""
    t = op.outputs[0].type
    if not isinstance(t, TensorType) or not t.is_static or math.prod(t.shape) != a.size:
        return None
    return a.reshape(t.shape)


def _constant_of_shape_value(op, attrs, s):
    if s.dtype == object or math.prod(s.tolist()) > MAX_FOLDED_ELEMENTS:
        return None
    value = attrs.get("value")
    fill = value.reshape(-1)[0] if isinstance(value, np.ndarray) and value.size else np.float32(0)
    return np.full(tuple(s.tolist()), fill, dtype=np.asarray(fill).dtype)


def _range_value(start, limit, delta):
    # Float ranges may round to another length than ONNX's formula; shapes are integer anyway.
    if start.dtype.kind not in "iu" or not delta:
        return None
    return np.arange(start, limit, delta, dtype=start.dtype)


def _int_div(a, b):
    # ONNX integer division truncates toward zero; numpy's // floors.
    if a.dtype.kind not in "iu":
        return (a / b).astype(a.dtype)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _numeric(fn: Callable) -> Callable:
    """A folder for numbers only: partly symbolic dims (object arrays) do no arithmetic."""

    def fold(op, attrs, *arrays):
        return None if any(a.dtype == object for a in arrays) else fn(*arrays)

    return fold


def _reduce_value(fn: Callable) -> Callable:
    def fold(op, attrs, a, *axes):
        if a.dtype == object or a.ndim != 1:  # shape arithmetic reduces vectors only
            return None
        return _as_output_shape(op, np.asarray(fn(a)).reshape(-1))

    return fold


# How to compute an op's first output from known inputs: fold(op, attrs, *input values).
# The structural folders only move elements around, so they work on partly symbolic dims too.
_FOLDERS: dict[str, Callable] = {
    "Identity": lambda op, attrs, a: a,
    "Cast": _cast_value,
    "Gather": lambda op, attrs, a, i: np.take(a, i.astype(np.int64), axis=attrs.get("axis", 0)),
    "Concat": lambda op, attrs, *arrays: np.concatenate(arrays, axis=attrs.get("axis", 0)),
    "Unsqueeze": _unsqueeze_value,
    "Squeeze": _squeeze_value,
    "Slice": _slice_value,
    "Reshape": lambda op, attrs, a, shape: _as_output_shape(op, a),
    "Transpose": lambda op, attrs, a: np.transpose(a, attrs.get("perm")),
    "ConstantOfShape": _constant_of_shape_value,
    "Add": _numeric(np.add),
    "Sub": _numeric(np.subtract),
    "Mul": _numeric(np.multiply),
    "Div": _numeric(_int_div),
    "Max": _numeric(lambda *xs: np.maximum.reduce(np.broadcast_arrays(*xs))),
    "Min": _numeric(lambda *xs: np.minimum.reduce(np.broadcast_arrays(*xs))),
    "Neg": _numeric(np.negative),
    "Abs": _numeric(np.abs),
    "Equal": _numeric(np.equal),
    "Greater": _numeric(np.greater),
    "GreaterOrEqual": _numeric(np.greater_equal),
    "Less": _numeric(np.less),
    "LessOrEqual": _numeric(np.less_equal),
    "And": _numeric(np.logical_and),
    "Or": _numeric(np.logical_or),
    "Not": _numeric(np.logical_not),
    "Where": _numeric(np.where),
    "Range": _numeric(_range_value),
    "ReduceProd": _reduce_value(np.prod),
    "ReduceSum": _reduce_value(np.sum),
}


def _fold(op: Operation, attrs: dict, folded: dict) -> None:
    """Record the value of op's first output when it is small and computable now."""
    if op.domain or not op.outputs:
        return
    if op.op_type in ("Shape", "Size"):
        out = (_shape_value if op.op_type == "Shape" else _size_value)(op, attrs)
    else:
        fn = _FOLDERS.get(op.op_type)
        if fn is None:
            return
        arrays = [value_of(v) for v in op.inputs if v is not None]
        if not arrays or any(a is None or a.size > MAX_FOLDED_ELEMENTS for a in arrays):
            return
        if any(a.dtype.kind in "US" or (a.dtype == object and not _is_dims(a)) for a in arrays):
            return  # string tensors are objects too, but not dims
        out = fn(op, attrs, *arrays)
    if out is None:
        return
    out = np.asarray(out)
    if out.dtype.kind in "US":  # numpy made a lone symbolic dim a str scalar: keep it a dim
        out = out.astype(object)
    if out.size <= MAX_FOLDED_ELEMENTS:
        folded[op.outputs[0]] = out


# Ops whose small outputs inference computes from known inputs (Shape and Size from shapes alone).
FOLDABLE = frozenset(_FOLDERS) | {"Shape", "Size"}


def fold_op(op: Operation) -> np.ndarray | None:
    """The value of ``op``'s first output when its inputs' values (constants) and shapes decide it
    and it is small (shape arithmetic: at most MAX_FOLDED_ELEMENTS elements); otherwise None."""
    schema = lookup(op.domain, op.op_type)
    if schema is None:
        return None
    folded: dict = {}
    try:
        _fold(op, schema.with_defaults(op.attributes), folded)
    except Exception as e:  # as in inference: a value that cannot be folded is computed later
        _log.debug("folding %s failed: %s", op, e)
        return None
    out = folded.get(op.outputs[0]) if op.outputs else None
    return None if out is None or out.dtype == object else out


def fold_values(
    op_type: str, args: list, attributes: dict, out_type: ValueType, domain: str = ""
) -> np.ndarray | None:
    """``fold_op`` of an ``op_type`` applied to the arrays ``args`` (None for an omitted input)
    with ``attributes``, its output typed ``out_type``: the value of an op outside any program
    (a plan step on the host, an expression tried at one value of its leaf)."""
    inputs = []
    for a in args:
        if a is None:
            inputs.append(None)
            continue
        a = np.asarray(a)
        inputs.append(Value("x", TensorType(DataType.from_numpy(a.dtype), a.shape), a))
    op = Operation(op_type, inputs, dict(attributes), domain=domain, num_outputs=1)
    op.outputs[0].type = out_type
    return fold_op(op)


def _is_dims(a: np.ndarray) -> bool:
    return all(d is None or isinstance(d, (int, str)) for d in a.reshape(-1).tolist())
