"""Inference rules of sequences and optionals."""

from __future__ import annotations

from .infer_dims import _attr_dtype, _input, _join_types, _tensor, _type
from .registry import inference
from .types import DataType, OptionalType, SequenceType, TensorType


@inference("SequenceConstruct")
def _sequence_construct(op, attrs):
    elem = _type(op, 0)
    for i in range(1, len(op.inputs)):
        elem = _join_types(elem, _type(op, i))
    return [None if elem is None else SequenceType(elem)]


@inference("SequenceEmpty")
def _sequence_empty(op, attrs):
    return [SequenceType(TensorType(_attr_dtype(attrs.get("dtype"), DataType.FLOAT), None))]


@inference("SequenceInsert")
def _sequence_insert(op, attrs):
    seq, item = _type(op, 0), _type(op, 1)
    if not isinstance(seq, SequenceType) or item is None:
        return [None]
    elem = _join_types(seq.elem, item)
    return [
        SequenceType(elem if elem is not None else TensorType(item.dtype, None))
        if isinstance(item, TensorType)
        else None
    ]


@inference("SequenceErase")
def _sequence_erase(op, attrs):
    return [_type(op, 0)]


@inference("SequenceAt")
def _sequence_at(op, attrs):
    seq = _type(op, 0)
    return [seq.elem if isinstance(seq, SequenceType) else None]


@inference("SequenceLength")
def _sequence_length(op, attrs):
    return [TensorType(DataType.INT64, ())]


@inference("SplitToSequence")
def _split_to_sequence(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else SequenceType(TensorType(t.dtype, None))]


@inference("ConcatFromSequence")
def _concat_from_sequence(op, attrs):
    seq = _type(op, 0)
    elem = seq.elem if isinstance(seq, SequenceType) else None
    if not isinstance(elem, TensorType):
        return [None]
    rank = None if elem.shape is None else len(elem.shape) + (1 if attrs.get("new_axis") else 0)
    return [TensorType(elem.dtype, None if rank is None else (None,) * rank)]


@inference("Optional")
def _optional(op, attrs):
    elem = _type(op, 0) if _input(op, 0) is not None else attrs.get("type")
    return [OptionalType(elem) if elem is not None else None]


@inference("OptionalGetElement")
def _optional_get(op, attrs):
    t = _type(op, 0)
    return [t.elem if isinstance(t, OptionalType) else t]


@inference("OptionalHasElement")
def _optional_has(op, attrs):
    return [TensorType(DataType.BOOL, ())]
