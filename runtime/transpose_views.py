"""Transposes of floats as prepared steps in a shape specialization, where what reads them sees
the arrays the kernel step gives them.

Transpose's kernel returns a strided view of its input, and what reads a float view computes on
its strides (a MatMul takes another BLAS path on a view than on a contiguous copy: other
rounding), so a float Transpose has no prepared call of its own (``kernels.tensor.
_transpose_call``) and its kernel step ends every bound run it stands in, its readers falling
back to their kernels. A specialization knows the Transpose's readers, and two cases give them
the kernel's arrays:

1. Every reader is a prepared Reshape, Flatten, Squeeze or Unsqueeze whose result from the
   kernel's view is C-contiguous, or a prepared Conv (its kernel convolves a C-contiguous copy
   of the view), or a prepared RNN, GRU or LSTM reading it as X (they copy X's values before
   their products): what they compute from the values in C order, which a copy of the transposed
   values into the Transpose's own place holds. Transpose (1, 0, 2) of [9, 2, 8] then Reshape
   to [9, 16] (an attention's heads joined); Transpose (0, 2, 1) of [1, 9, 16] into a 1-D Conv.
2. Every reader is a prepared call that takes any layout (``any_layout``: MatMul, Softmax,
   Shape) and computes on the strides it is given, or an Add, Sub, Mul, Div, Max or Min whose
   kernel's result from the view is C-contiguous (``_elementwise_contiguous``: the residual
   Add beside an attention's MatMul): the Transpose's place holds a copy of its
   input in the input's order, and the slot's array in each arena set is that place transposed
   as the kernel transposes its input: the same shape, strides and values. The readers are
   called as a step that is not bound calls them (their ``__call__``), whose results on a
   strided operand are the kernel's; a call's cheaper bound form may assume C-contiguous
   operands.

Neither case holds for a reader of another kind (an Add's result keeps its operand's
layout), a method result, a value with other writers, or a reader fused into another step;
case 2 not for a reader of the Transpose's input or of another Transpose of it too (the kernels'
views share memory: numpy multiplies a matrix by its own transpose by BLAS's syrk, other bits),
nor for an input that is not in memory of its own (``_own_place``)."""

from __future__ import annotations

import functools

import numpy as np

from .folded_values import _Folded
from .kernels import UfuncCall
from .steps import MethodState, _FusedAway, _KernelStep, _PreparedOutputsStep, _PreparedStep
from .straight_paths import _Skipped

_RESHAPES = frozenset(f"onnx::{op}" for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"))
# Ops whose prepared calls exist only where the kernel computes on a C-contiguous copy of its
# first input: a float Conv (``conv_recipe._conv_by_recipe``'s ascontiguousarray).
_COPYING = frozenset({"onnx::Conv"})
# Ops whose prepared calls (kernels.prepared_outputs: plain RNN, GRU and LSTM only) copy X's
# values into their own buffer before any product (``recurrent_frame``'s input products), as
# their kernels do: they take X in any layout.
_RECURRENT = frozenset({"onnx::RNN", "onnx::GRU", "onnx::LSTM"})
# Ufuncs whose every element is one correctly rounded operation, whatever loop numpy runs it by
# (a strided operand takes other loops than contiguous ones: exp and tanh may round otherwise).
_EXACT = frozenset({np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum})


class _CopyTransposed:
    """The input's axes permuted, copied into the output's C-contiguous view (case 1)."""

    __slots__ = ("perm",)

    def __init__(self, perm: tuple):
        self.perm = perm

    def __call__(self, out, x):
        moved = x.transpose(self.perm)
        if moved.shape != out.shape:  # copyto would broadcast it
            raise TypeError("not the declared shape")
        np.copyto(out, moved, casting="no")

    def bind(self, out, x):
        return functools.partial(np.copyto, out, x.transpose(self.perm), casting="no")


class _CopyUntransposed(_CopyTransposed):
    """The input copied in its own order into the place under the output's strided view (case 2:
    the view is that place transposed, so writing the transposed input through it is this copy)."""

    __slots__ = ()

    def bind(self, out, x):
        return functools.partial(np.copyto, out.transpose(tuple(np.argsort(self.perm))), x, casting="no")


class _CalledPlain:
    """A prepared call taking any layout, bound as its ``__call__`` (case 2's readers)."""

    __slots__ = ("call",)
    any_layout = True

    def __init__(self, call):
        self.call = call

    def __call__(self, out, *args):
        return self.call(out, *args)

    def bind(self, out, *args):
        return functools.partial(self.call, out, *args)


def _reshape_contiguous(step: _PreparedStep, in_shape: tuple, dtype, perm: tuple) -> bool:
    """Whether Reshape-like ``step``'s kernel gives a C-contiguous array from the transposed view."""
    shape = getattr(step.call, "shape", None)
    if shape is None:
        return False
    strided = np.empty(in_shape, dtype).transpose(perm)
    return np.reshape(strided, shape).flags.c_contiguous


def _elementwise_contiguous(step: _PreparedStep, out: int, view: np.ndarray, spec_of) -> bool:
    """Whether ``step`` is one exact ufunc (``_EXACT``) whose kernel, given the Transpose's
    ``view`` and C-contiguous operands of their specs, gets a C-contiguous result from numpy: the
    values that its bound call writes into its C-contiguous view, in the same layout. Unbound,
    such a step takes its kernel on the strided view, as before."""
    call = step.call
    if not isinstance(call, UfuncCall) or type(call).bind is not UfuncCall.bind or call.extra:
        return False
    if call.fn not in _EXACT:
        return False
    operands = []
    for i in step.in_slots:
        spec = None if i == out else spec_of(i) if i else None
        if i != out and spec is None:
            return False
        operands.append(view if i == out else np.zeros(spec[1], spec[0]))
    return call.fn(*operands).flags.c_contiguous


def _own_place(m: MethodState, slot: int, producers: dict, held: dict) -> bool:
    """Whether ``slot`` holds an array of its own memory: a constant, a method input with a place
    (a run copies it in; not the caller's array), or the result of prepared steps only (in their
    arena views). A kernel's
    result may be a view sharing memory with another value (a Slice, a Reshape), and views of one
    array read by one MatMul take other BLAS routines than copies: case 2 keeps such sharing only
    among the Transposes of one input (``views``)."""
    if slot in producers:  # (a _FusedAway's value: the fused prepared call writes its view)
        return producers[slot] <= {_PreparedStep, _PreparedOutputsStep, _FusedAway}
    if slot in set(m._input_slots):
        return m._planned[slot] is not None or slot in held
    return isinstance(m._initial[slot], np.ndarray)


def _reads_values(step, out: int, in_shape: tuple, dtype, perm: tuple) -> bool:
    """Whether ``step`` reads slot ``out`` as its first input only and computes from its values
    in C order alone (case 1). Any other kind of step (a kernel step, a move, a jump) reads it
    as the kernel made it."""
    if type(step) not in (_PreparedStep, _PreparedOutputsStep):
        return False
    if not step.in_slots or step.in_slots[0] != out or out in step.in_slots[1:]:
        return False
    op = step.kernel.op_name
    if type(step) is _PreparedOutputsStep:
        return op in _RECURRENT
    return op in _COPYING or (op in _RESHAPES and _reshape_contiguous(step, in_shape, dtype, perm))


def _reads_strided(
    m: MethodState, kernel, steps_reading: list, views: dict, producers: dict, held: dict, spec_of
) -> bool:
    """Whether case 2 holds for Transpose ``kernel`` read by ``steps_reading``."""
    (x,), out = kernel.in_slots, kernel.out_slots[0]
    if any(type(s) is not _PreparedStep for s in steps_reading):  # a _FusedAway among them too
        return False
    if not _own_place(m, x, producers, held):
        return False
    if any(set(s.in_slots) & views.get(x, set()) - {out} for s in steps_reading):
        return False
    (in_dtype, in_shape), perm = spec_of(x), _perm(kernel, len(spec_of(x)[1]))
    view = np.zeros(in_shape, in_dtype).transpose(perm)
    return all(
        getattr(s.call, "any_layout", False) or _elementwise_contiguous(s, out, view, spec_of)
        for s in steps_reading
    )


def _perm(kernel, rank: int) -> tuple:
    perm = kernel.attrs.get("perm")
    return tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)


def prepare_transposes(
    m: MethodState, steps: list, candidates: list, held: dict, spec_of
) -> dict[int, tuple]:
    """Make the Transpose kernel steps at ``candidates`` (pc, input spec, output spec) prepared
    steps where case 1 or 2 holds, their readers in case 2 _CalledPlain; the places they write
    go into ``held`` (slot → (dtype, shape)) where the file's arena has none. Returns, for case
    2, slot → (input shape, perm): the view each arena set gives the slot (``strided_view``)."""
    if not candidates:
        return {}
    readers: dict[int, list[int]] = {}
    writers: dict[int, int] = {}
    producers: dict[int, set[type]] = {}  # slot → the kinds of step that write it
    # Each Transpose's input with the slots of the kernel's views of it: the input and its
    # Transposes. A reader of two of them gets views of one array from the kernels, and numpy's
    # matmul of a matrix by its own transpose takes another BLAS routine (syrk) than of copies.
    views: dict[int, set[int]] = {}
    for pc, step in enumerate(steps):
        if type(step) is _KernelStep and step.op_name == "onnx::Transpose" and step.in_slots[0]:
            views.setdefault(step.in_slots[0], {step.in_slots[0]}).add(step.out_slots[0])
        if isinstance(step, (_Folded, _Skipped)):  # never run
            continue
        info = step.info()
        for slot in set(info.reads):
            readers.setdefault(slot, []).append(pc)
        for slot in info.writes:
            writers[slot] = writers.get(slot, 0) + 1
            producers.setdefault(slot, set()).add(type(step))
    results, inputs = set(m._output_slots), set(m._input_slots)
    strided: dict[int, tuple] = {}
    for pc, (in_dtype, in_shape), (out_dtype, out_shape) in candidates:
        kernel = steps[pc]
        if type(kernel) is not _KernelStep or len(kernel.in_slots) != 1 or in_dtype != out_dtype:
            continue
        out = kernel.out_slots[0]
        rank = len(in_shape)
        perm = _perm(kernel, rank)
        if sorted(perm) != list(range(rank)) or tuple(in_shape[p] for p in perm) != tuple(out_shape):
            continue
        reading = readers.get(out, [])
        if not reading or out in results or out in inputs or writers.get(out) != 1:
            continue
        steps_reading = [steps[r] for r in reading]
        if all(_reads_values(s, out, tuple(in_shape), in_dtype, perm) for s in steps_reading):
            call = _CopyTransposed(perm)
        elif _reads_strided(m, kernel, steps_reading, views, producers, held, spec_of):
            call = _CopyUntransposed(perm)
            strided[out] = (tuple(in_shape), perm)
            for r, s in zip(reading, steps_reading):
                if not getattr(s.call, "any_layout", False):
                    continue  # an exact ufunc: bound as it is, unbound by its kernel
                plain = steps[r] = _PreparedStep()
                plain.call, plain.in_slots, plain.kernel, plain.out_slot = (
                    s.call if isinstance(s.call, _CalledPlain) else _CalledPlain(s.call),
                    s.in_slots,
                    s.kernel,
                    s.out_slot,
                )
        else:
            continue
        step = steps[pc] = _PreparedStep()
        step.call, step.in_slots, step.kernel, step.out_slot = call, list(kernel.in_slots), kernel, out
        if m._planned[out] is None:
            held[out] = (out_dtype, tuple(out_shape))
    return strided


def strided_view(place: np.ndarray, in_shape: tuple, perm: tuple) -> np.ndarray:
    """The array a case-2 Transpose's slot holds: its C-contiguous ``place`` as the kernel's view
    of an input of ``in_shape`` in that place."""
    return place.reshape(in_shape).transpose(perm)
