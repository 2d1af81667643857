"""Decided paths: methods whose every branch follows from the input shapes and a few small inputs.

An exported model often branches on what its inputs' shapes already say (``If(Equal(Gather(
Shape(x), 0), 1))``: squeeze a batch of one) and on a small input that only picks a branch
(Silero VAD's sample rate, ``If(Equal(sr, 16000))``). Lowered to forward jumps, such a method
runs the same steps at every run with the same input shapes and the same values of those
inputs, so an If's results, written by a move in each branch, have the same shapes at every
such run too: shape specializations (shape_specializations.py) may hold and prepare them and
what follows them, instead of stopping at the first If.

``_deciding_inputs`` finds the small inputs whose values only decide jumps (their values join
the input shapes in the key of a shape specialization: ``run_key``; such an input whose value
changes at every run, a step counter, makes every run the first of its key, which runs the
method's own steps and notes shapes, as a new input shape does); ``_branch_joins`` the values
that several steps write where no step reads them between the first and last writer in the
chain's order (an If's results: each branch writes them, the steps after the join read them).
"""

from __future__ import annotations

import numpy as np

from offload.ir import TensorType, computed_once

from .pte_values import value_type
from .steps import MethodState, SubPlan, _JumpStep, _KernelStep, _PreparedStep

# An input decides branches only when it has at most this many elements: its bytes are part of
# the key of every run.
DECIDING_ELEMENTS = 8


def _deciding_inputs(m: MethodState, writers: dict[int, int]) -> set[int]:
    """Method inputs (slots) of a static shape of at most DECIDING_ELEMENTS integers or booleans
    that no step writes, whose values reach jump conditions and nothing else: every step that
    reads them or what deterministic ONNX ops compute from them (``ir.computed_once``) is such
    an op or a jump, never a move, a delegate, another op or the method's results."""
    results = set(m._output_slots)
    found = set()
    for slot in m._input_slots:
        declared = value_type(m._values[slot])
        if (
            slot in writers
            or not isinstance(declared, TensorType)
            or not declared.is_static
            or np.dtype(declared.dtype.numpy).kind not in "biu"
            or int(np.prod(declared.shape, dtype=np.int64)) > DECIDING_ELEMENTS
        ):
            continue
        reach, decides, ok = {slot}, False, True
        for step in m._steps:
            info = step.info()
            if not reach.intersection(info.reads):
                continue
            if isinstance(step, _JumpStep):
                decides = True
                continue
            kernel = step.kernel if isinstance(step, _PreparedStep) else step
            domain, _, op_type = getattr(kernel, "op_name", "").partition("::")
            if (
                type(kernel) is not _KernelStep
                or not computed_once("" if domain == "onnx" else domain, op_type)
                or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
            ):
                ok = False
                break
            reach.update(info.writes)
        if ok and decides and not reach & results:
            found.add(slot)
    return found


def _branch_joins(m: MethodState, writers: dict[int, int]) -> set[int]:
    """Values with several writers, all of them before the first step that reads the value."""
    first_read: dict[int, int] = {}
    last_write: dict[int, int] = {}
    for pc, step in enumerate(m._steps):
        info = step.info()
        for v in info.reads:
            first_read.setdefault(v, pc)
        for v in info.writes:
            last_write[v] = pc
    return {
        v
        for v, n in writers.items()
        if n > 1 and v not in m._input_slots and first_read.get(v, len(m._steps)) > last_write[v]
    }


def _conditions(m: MethodState) -> set[int]:
    """The values that jumps read."""
    return {s.cond for s in m._steps if isinstance(s, _JumpStep)}


class _Joins:
    """What the writers of each branch join seen so far made of it: the join's shape follows from
    the input shapes where every writer's does, its value where every writer's does."""

    def __init__(self, joins: set[int], writers: dict[int, int]):
        self.joins, self.writers = joins, writers
        self.left = {v: writers[v] for v in joins}
        self.unshaped: set[int] = set()
        self.unknown: set[int] = set()

    def wrote(self, v: int, shape_follows: bool, value_follows: bool, shaped: set, known: set) -> None:
        if not shape_follows:
            self.unshaped.add(v)
        if not value_follows:
            self.unknown.add(v)
        self.left[v] -= 1
        if self.left[v] == 0 and v not in self.unshaped:  # the last writer; the steps after read it
            shaped.add(v)
            if v not in self.unknown:
                known.add(v)


def run_key(args: list, deciding: tuple[int, ...]) -> tuple:
    """The key of a run's shape specialization: each input's shape, and for the inputs that
    decide branches (positions ``deciding``) their shape and bytes."""
    key = [getattr(a, "shape", None) for a in args]
    for k in deciding:
        a = args[k]
        key[k] = (a.shape, a.tobytes()) if isinstance(a, np.ndarray) else None
    return tuple(key)
