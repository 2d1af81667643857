"""What inference rules read and compute with: input types, known input values, dims."""

from __future__ import annotations

import contextvars
import math

import numpy as np

from .core import Operation, Value
from .types import DataType, Dim, OptionalType, SequenceType, TensorType, ValueType

__all__ = ["broadcast_shapes", "value_of"]
# Values folded by the running pass (Value → small ndarray); dims may be str (symbolic) or
# None (unknown) in object arrays that stand for partly known shapes.
_FOLDED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("offload_folded", default=None)
MAX_FOLDED_ELEMENTS = 64  # larger results are not worth tracking: shape vectors are short
MAX_READ_ELEMENTS = 4096  # a "shape" or "axes" input larger than this is a weight, not a shape
MAX_RANK = 64  # an inferred rank past this (the frontends' limit) is left unknown: no tensor has it
# ---- reading inputs ----------------------------------------------------------------------


def _input(op: Operation, i: int) -> Value | None:
    return op.inputs[i] if i < len(op.inputs) else None


def _type(op: Operation, i: int) -> ValueType | None:
    v = _input(op, i)
    return None if v is None else v.type


def _tensor(op: Operation, i: int) -> TensorType | None:
    t = _type(op, i)
    return t if isinstance(t, TensorType) else None


def _dtype(op: Operation, i: int) -> DataType | None:
    t = _tensor(op, i)
    return None if t is None else t.dtype


def _shape(op: Operation, i: int) -> tuple[Dim, ...] | None:
    t = _tensor(op, i)
    return None if t is None else t.shape


def value_of(v: Value | None) -> np.ndarray | None:
    """The value of ``v`` when known before running: a constant or a value folded by the pass."""
    if v is None:
        return None
    if v.const_value is not None:
        return v.const_value
    folded = _FOLDED.get()
    return None if folded is None else folded.get(v)


def _dims_value(op: Operation, i: int) -> list | None:
    """Input ``i`` as a flat list of dims (int, symbol str or None), when its value is known."""
    a = value_of(_input(op, i))
    if a is None or a.dtype.kind not in "iubO" or a.size > MAX_READ_ELEMENTS:
        return None
    out = a.reshape(-1).tolist()
    if not all(d is None or isinstance(d, (int, str)) for d in out):
        return None
    return [int(d) if isinstance(d, int) else d for d in out]


def _ints_value(op: Operation, i: int) -> list[int] | None:
    """Input ``i`` as a flat list of ints, when every entry is a known integer."""
    dims = _dims_value(op, i)
    return dims if dims is not None and all(isinstance(d, int) for d in dims) else None


def _length(op: Operation, i: int) -> int | None:
    """The static length of 1-D input ``i`` (from its type), even when its values are unknown;
    None past MAX_RANK: the callers read it as a rank, and no tensor has a longer shape."""
    s = _shape(op, i)
    ok = s is not None and len(s) == 1 and isinstance(s[0], int) and s[0] <= MAX_RANK
    return s[0] if ok else None


def _unknown_dims(rank: int | None) -> tuple | None:
    return None if rank is None or rank < 0 else (None,) * rank


def _tt(dtype: DataType | None, shape) -> TensorType | None:
    """A tensor type, or None when the element type is unknown (no TensorType without one)."""
    if dtype is None:
        return None
    return TensorType(DataType(dtype), None if shape is None else tuple(shape))


def _axis(axis: int, rank: int) -> int | None:
    """A possibly negative axis as an index in [0, rank), or None when out of range."""
    a = axis + rank if axis < 0 else axis
    return a if 0 <= a < rank else None


def _attr_dtype(code, default: DataType | None) -> DataType | None:
    try:
        return DataType(int(code)) if code else default
    except (TypeError, ValueError):
        return default


# ---- dimension arithmetic ----------------------------------------------------------------


def _broadcast_dim(dims) -> Dim:
    """One output dim of numpy broadcasting: 1 yields, a known size wins, equal symbols stay."""
    big = {d for d in dims if d != 1}
    if not big:
        return 1
    sizes = {d for d in big if isinstance(d, int)}
    if sizes:
        # Any other operand must be 1 or this size in a valid model.
        return sizes.pop() if len(sizes) == 1 else None
    if None in big or len(big) > 1:
        return None
    return big.pop()


def broadcast_shapes(*shapes) -> tuple[Dim, ...] | None:
    """Multidirectional (numpy) broadcasting of shapes; None when any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(_broadcast_dim(ds) for ds in zip(*padded))


def _product(dims) -> Dim:
    """The product of dims: an int, a lone symbol (times ones), or None."""
    known = [d for d in dims if d != 1]
    if all(isinstance(d, int) for d in known):
        return math.prod(known)
    if len(known) == 1 and isinstance(known[0], str):
        return known[0]
    return None


def _merge_dim(a: Dim, b: Dim) -> Dim:
    """Two facts about one dim: a known size beats a symbol, a symbol beats nothing."""
    if isinstance(a, int) or b is None:
        return a
    if isinstance(b, int) or a is None:
        return b
    return a if a == b else None


def _join_types(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    """What is true of a value of either type (If branches, loop-carried values)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype:
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(a.dtype, None)
        return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))
    if type(a) is type(b) and isinstance(a, (SequenceType, OptionalType)):
        elem = _join_types(a.elem, b.elem)
        return None if elem is None else type(a)(elem)
    return None


def _mul(d: Dim, k: int) -> Dim:
    return d * k if isinstance(d, int) else (d if k == 1 else None)


def _exact_div(d: Dim, k: int) -> Dim:
    return d // k if isinstance(d, int) and d % k == 0 else (d if k == 1 else None)
