"""Folded values: what a shape specialization holds as constants instead of computing at each run.

A value *known* from a run's key (``shape_specializations._find_shape_steps``: Shape or Size of
an input, deterministic ops of such values and constants, the small inputs that decide branches
where they join the key) is the same at every run with that key. The first run with a key notes
each known value a kernel step writes (``note_known``); the shape specialization made from those
notes drops the steps that wrote them (``fold_known``: a ``_Folded`` step in place of each) and
puts the values in the initial frame of each of its arena sets, where later steps read them as
they read constants, and prepared steps that read them can be bound. An exported transformer
computes every reshape target as Shape → Gather → Concat (80 of its 250 steps); an exported
voice-activity net its batch and branch conditions as Shape → Equal → Not."""

from __future__ import annotations

import numpy as np

from .steps import MethodState, StepInfo, _KernelStep, _PreparedStep, _ShapeStep


class Noted(dict):
    """A first run's notes for a shape specialization: slot → (dtype, shape) of each value it may
    hold; in ``values`` the known values the kernel steps wrote (slot → read-only array); in
    ``varied`` the slots written with values of several types (a loop's, whose shape changed
    from trip to trip) or with something else than an array after an array."""

    __slots__ = ("values", "varied")

    def __init__(self):
        super().__init__()
        self.values: dict[int, np.ndarray] = {}
        self.varied: set[int] = set()


def known_notes(m: MethodState, limit: int) -> list[tuple[int, ...]]:
    """By instruction: the known values (``m._known``) a kernel step before ``limit`` writes,
    which a first run notes with their values."""
    out = []
    for pc, step in enumerate(m._steps):
        if pc < limit and type(step) in (_KernelStep, _ShapeStep, _PreparedStep):
            out.append(tuple(v for v in step.info().writes if v in m._known))
        else:
            out.append(())
    return out


def note_known(seen: Noted, slot: int, value) -> None:
    if type(value) is np.ndarray:
        kept = np.array(value, copy=True)  # its own memory: the arena is reused
        kept.flags.writeable = False
        seen.values[slot] = kept


class _Folded:
    """The place of a step whose results a shape specialization holds (``fold_known``): nothing
    to run, nothing read or written (the values are constants of the specialization's frames)."""

    __slots__ = ("kernel",)

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, frame: list) -> None:
        return None

    def info(self) -> StepInfo:
        info = self.kernel.info()
        return StepInfo("folded", info.name, (), (), None, info.label)


def fold_known(m: MethodState, steps: list, seen: dict) -> dict[int, np.ndarray]:
    """Replace in ``steps`` (a shape specialization's copy of the method's) each kernel step
    before the specializations' limit whose results are all known values that ``seen`` noted;
    returns those values by slot."""
    values = getattr(seen, "values", None)
    folded: dict[int, np.ndarray] = {}
    if not values:
        return folded
    for pc in range(min(m._specialization_limit, len(steps))):
        step = steps[pc]
        if type(step) not in (_KernelStep, _ShapeStep, _PreparedStep):
            continue
        writes = step.info().writes
        if writes and all(v in values for v in writes):
            steps[pc] = _Folded(step)
            folded.update((v, values[v]) for v in writes)
    return folded
