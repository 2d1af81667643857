"""Bound runs: prepared steps whose inputs are certain, their calls bound to one arena set's arrays."""

from __future__ import annotations

import numpy as np

from offload.ir import TensorType

from .folded_values import _Folded
from .pte_values import value_type
from .steps import MethodState, _BoundRun, _FusedAway, _JumpStep, _PreparedStep


def _static_inputs(m: MethodState) -> set[int]:
    """The method inputs with arena views of their declared static type: every run copies the
    input into its view (``_call``), so the view holds an array of that type."""
    certain = set()
    for i in m._input_slots:
        view, declared = m._planned[i], value_type(m._values[i])
        if (
            view is not None
            and isinstance(declared, TensorType)
            and declared.is_static
            and declared.dtype.numpy == view.dtype
            and tuple(declared.shape) == view.shape
        ):
            certain.add(i)
    return certain


def _bind_runs(
    m: MethodState, steps: list, certain_inputs: set[int]
) -> tuple[list, list[list[_PreparedStep]]]:
    """Group the prepared steps whose inputs are certain: constants, the method inputs of
    ``certain_inputs`` (with arena views, copied into them whatever their layout, ``_call``), and
    the outputs of prepared steps before them (always in their arena views). Runs do not span a
    jump target. Returns ``steps`` with each run replaced by a _BoundRun at its first index, and
    the runs' steps."""
    writers: dict[int, int] = {}
    for step in steps:
        for slot in step.info().writes:
            writers[slot] = writers.get(slot, 0) + 1
    inputs = set(m._input_slots)
    certain = set()
    for i, value in enumerate(m._initial):
        if m._planned[i] is None and type(value) is np.ndarray and value.flags.c_contiguous:
            certain.add(i)
    certain -= inputs
    certain |= certain_inputs
    certain -= set(writers)
    targets = {s.dest for s in steps if isinstance(s, _JumpStep)}
    fast_steps, bound_runs = list(steps), []
    run: list[int] = []
    for pc, step in enumerate([*steps, None]):
        if isinstance(step, (_FusedAway, _Folded)):  # nothing to run: a run goes on past it
            continue
        ok = (
            isinstance(step, _PreparedStep)
            and all(i in certain for i in step.in_slots)
            and writers.get(step.out_slot) == 1
            and step.out_slot not in inputs
        )
        if run and (not ok or pc in targets):
            bound = _BoundRun()
            bound.k, bound.end, bound.steps = len(bound_runs), run[-1] + 1, [steps[j] for j in run]
            bound_runs.append(bound.steps)
            fast_steps[run[0]] = bound
            run = []
        if isinstance(step, _PreparedStep) and writers.get(step.out_slot) == 1:
            certain.add(step.out_slot)
        if ok:
            run.append(pc)
    return fast_steps, bound_runs
