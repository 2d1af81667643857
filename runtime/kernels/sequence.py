"""Sequence and optional kernels: a sequence is a Python list of arrays, an empty optional None."""

from __future__ import annotations

import numpy as np

from offload.errors import ShapeError

from . import kernel
from ._util import normalize_axis


def _position(op: str, position, n: int, allow_end: bool) -> int:
    """A possibly negative position as an index; ``allow_end`` admits ``n`` (insert at the back)."""
    p = int(np.asarray(position).reshape(-1)[0])
    hi = n if allow_end else n - 1
    if not -n <= p <= hi:
        raise ShapeError(f"{op}: position {p} is out of range for a sequence of {n} tensors")
    return p + n if p < 0 else p


@kernel("SequenceConstruct")
def sequence_construct(ctx, *inputs):
    return list(inputs)


@kernel("SequenceEmpty")
def sequence_empty(ctx, *, dtype):
    return []


@kernel("SequenceInsert")
def sequence_insert(ctx, input_sequence, tensor, position=None):
    out = list(input_sequence)
    if position is None:
        out.append(tensor)
    else:
        out.insert(_position("SequenceInsert", position, len(out), allow_end=True), tensor)
    return out


@kernel("SequenceAt")
def sequence_at(ctx, input_sequence, position):
    return input_sequence[_position("SequenceAt", position, len(input_sequence), allow_end=False)]


@kernel("SequenceErase")
def sequence_erase(ctx, input_sequence, position=None):
    out = list(input_sequence)
    if not out:
        raise ShapeError("SequenceErase: the sequence is empty")
    del out[-1 if position is None else _position("SequenceErase", position, len(out), allow_end=False)]
    return out


@kernel("SequenceLength")
def sequence_length(ctx, input_sequence):
    return np.array(len(input_sequence), dtype=np.int64)


@kernel("ConcatFromSequence")
def concat_from_sequence(ctx, input_sequence, *, axis, new_axis):
    if not input_sequence:
        raise ShapeError("ConcatFromSequence: the sequence is empty")
    rank = np.ndim(input_sequence[0])
    if new_axis:
        return np.stack(input_sequence, axis=normalize_axis(axis, rank + 1, "ConcatFromSequence"))
    return np.concatenate(input_sequence, axis=normalize_axis(axis, rank, "ConcatFromSequence"))


@kernel("SplitToSequence")
def split_to_sequence(ctx, input, split=None, *, axis, keepdims):
    axis = normalize_axis(axis, input.ndim, "SplitToSequence")
    length = input.shape[axis]
    if split is None:
        parts = np.split(input, length, axis=axis)
        return parts if keepdims else [np.squeeze(p, axis=axis) for p in parts]
    split = np.asarray(split, dtype=np.int64)
    if split.ndim == 0:
        # Chunks of one size; the last one takes what is left.
        cuts = np.arange(int(split), length, int(split))
    else:
        if split.sum() != length:
            raise ShapeError(f"SplitToSequence: split {split.tolist()} does not sum to dimension {length}")
        cuts = np.cumsum(split)[:-1]
    return np.split(input, cuts, axis=axis)


@kernel("SequenceMap")
def sequence_map(ctx, input_sequence, *additional_inputs, body):
    n = len(input_sequence)
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != n:
            raise ShapeError(f"SequenceMap: sequences of lengths {n} and {len(extra)}")
    outputs = [[] for _ in body.outputs]
    for i in range(n):
        args = [input_sequence[i]] + [a[i] if isinstance(a, list) else a for a in additional_inputs]
        for seq, value in zip(outputs, ctx.run_block(body, args)):
            seq.append(value)
    return tuple(outputs)


@kernel("Optional")
def optional(ctx, input=None, *, type):
    return input


@kernel("OptionalHasElement")
def optional_has_element(ctx, input=None):
    return np.array(input is not None)


@kernel("OptionalGetElement")
def optional_get_element(ctx, input):
    if input is None:
        raise ShapeError("OptionalGetElement: the optional is empty")
    return input
