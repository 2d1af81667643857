"""Bound runs: prepared steps whose inputs are certain, their calls bound to one arena set's arrays."""

from __future__ import annotations

import numpy as np

from offload.ir import TensorType

from .folded_values import _Folded
from .pte_values import value_type
from .steps import MethodState, _BoundRun, _FusedAway, _JumpStep, _PreparedOutputsStep, _PreparedStep
from .straight_paths import _Goto, _Skipped

# Method inputs of a static tensor type up to this size get a place of their own in each arena
# set (``_place_inputs``): a run copies such an input into it, and the prepared steps that read it
# can then be bound instead of checking their inputs at each run. A larger input is read where the
# caller's array lies: copying it would cost more than the checks it saves.
INPUT_PLACE_BYTES = 1 << 16


def _place_inputs(m: MethodState) -> None:
    """Give each small input of a static tensor type that has no arena view a place of its own
    (``m._input_places``, slot → (dtype, shape)), in ``m._planned`` and ``m._initial``; inputs
    that only delegates read in device memory (``m._device_readers``) keep none."""
    for i in m._input_slots:
        declared = value_type(m._values[i])
        if (
            m._planned[i] is not None
            or m._initial[i] is not None
            or i in m._device_readers
            or not isinstance(declared, TensorType)
            or not declared.is_static
            or declared.dtype.numpy is None
        ):
            continue
        dtype, shape = np.dtype(declared.dtype.numpy), tuple(declared.shape)
        if dtype.hasobject or dtype.itemsize * int(np.prod(shape)) > INPUT_PLACE_BYTES:
            continue
        m._input_places[i] = (dtype, shape)
    _new_input_places(m, m._planned, m._initial)


def _new_input_places(m: MethodState, planned: list, initial: list) -> None:
    """New arrays for the input places of one arena set, counted as arena memory (a result that
    is an input is copied out of it, ``Module._detach``)."""
    for i, (dtype, shape) in m._input_places.items():
        place = np.zeros(shape, dtype)
        m.module._hold_arena(place)
        planned[i] = initial[i] = place


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
) -> tuple[list, list[list[_PreparedStep | _PreparedOutputsStep]]]:
    """Group the prepared steps whose inputs are certain: constants, the method inputs of
    ``certain_inputs`` (with arena views, copied into them whatever their layout, ``_call``), and
    the results of prepared steps before them (always in their arena views, _results_in_views).
    Runs do not span a jump target. Returns ``steps`` with each run replaced by a _BoundRun at its first index, and
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
        # nothing to run (a _Goto: never reached from a run that goes on past it, straight_paths)
        if isinstance(step, (_FusedAway, _Folded, _Skipped, _Goto)):
            continue
        outs = _results_in_views(step, writers, inputs)
        bindable = outs is not None and not getattr(step, "results_in_view", False)
        ok = bindable and all(i in certain or _omitted(step, i) for i in step.in_slots)
        if run and (not ok or pc in targets):
            bound = _BoundRun()
            bound.k, bound.end, bound.steps = len(bound_runs), run[-1] + 1, [steps[j] for j in run]
            bound_runs.append(bound.steps)
            fast_steps[run[0]] = bound
            run = []
        if outs is not None:
            certain.update(outs)
        if ok:
            run.append(pc)
    return fast_steps, bound_runs


def _omitted(step, slot: int) -> bool:
    """Whether input ``slot`` of a prepared step is an omitted input (slot 0, always None) that
    its call takes (``omitted_inputs``)."""
    return slot == 0 and getattr(step.call, "omitted_inputs", False)


def _results_in_views(step, writers: dict[int, int], inputs: set[int]) -> list[int] | None:
    """The slots a prepared step always leaves its results in, in their arena views, where it is
    their one writer and none is a method input; None for any other step (it may not be bound).
    A _PreparedOutputsStep counts where its call binds (``bindable``): its wanted results; a
    step that says ``results_in_view`` counts too, though it is never bound itself."""
    if isinstance(step, _PreparedStep) or getattr(step, "results_in_view", False):
        outs = [step.out_slot]  # (a loop's product that reuses its result: loop_reuse.py)
    elif isinstance(step, _PreparedOutputsStep) and step.bindable:
        outs = [s for s, w in zip(step.out_slots, step.wanted) if w]
    else:
        return None
    if any(writers.get(s) != 1 or s in inputs for s in outs):
        return None
    return outs
