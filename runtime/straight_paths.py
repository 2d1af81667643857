"""Straight paths: a shape specialization's steps with every jump its key decides taken ahead of time.

In a shape specialization (shape_specializations.py) the conditions of an If lowered to jumps
are folded values (folded_values.py): a Shape → Gather → Equal of an input, a small input that
only picks a branch (decided_paths.py). Every run with the specialization's key then takes the
same steps. ``straighten`` follows the steps from the first one, deciding each jump as the jump
itself would from its folded (or constant) condition, and rewrites the specialization's steps:

1. a jump that falls through becomes ``_Skipped``; one that jumps becomes ``_Goto`` (no
   condition read);
2. each step no run with the key reaches becomes ``_Skipped``;
3. a move on the path (an If's result written by its branch) into a place the specialization
   holds, from a value of the same dtype and shape, becomes a prepared step that copies
   (``_MoveCopy``): with the other branch's writer skipped it is the join's one writer, so the
   prepared steps of the taken branch, its moves and what reads the join are bound as one run
   (bound_runs.py), where the method's steps run a jump, a move and an unbound step each
   (2-5 µs each; an exported voice-activity net takes 11 jumps and 11 moves a run).

Nothing is rewritten where a jump on the path reads a condition that is not known, or jumps
backwards (a loop). The steps keep their places, so jump targets and the specialization's
other bookkeeping by instruction stay as they are. The same kernels run on the same values: the
same bits as the method's own steps.
"""

from __future__ import annotations

import functools

import numpy as np

from .steps import MethodState, StepInfo, _JumpStep, _MoveStep, _PreparedStep


class _Skipped:
    """The place of a step that no run with the specialization's key reaches, or of a jump that
    falls through there: nothing to run, nothing read or written."""

    __slots__ = ("step",)

    def __init__(self, step):
        self.step = step

    def run(self, frame: list) -> None:
        return None

    def info(self) -> StepInfo:
        info = self.step.info()
        return StepInfo("skipped", info.name, (), (), None, info.label)


class _Goto:
    """A jump that every run with the specialization's key takes: to ``dest``, no condition read."""

    __slots__ = ("dest",)

    def __init__(self, dest: int):
        self.dest = dest

    def run(self, frame: list) -> int:
        return self.dest

    def info(self) -> StepInfo:
        return StepInfo("jump", "", (), (), self.dest)


class _MoveCopy:
    """The call of a prepared move: the source copied into the destination's place. A source of
    another dtype or shape raises TypeError before anything is written (the move's own way
    then stores it, as ``_MoveStep`` does)."""

    __slots__ = ()

    def __call__(self, out: np.ndarray, x) -> None:
        if type(x) is not np.ndarray or x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError(
                f"move: {getattr(x, 'dtype', type(x).__name__)} into {out.dtype}{list(out.shape)}"
            )
        np.copyto(out, x)

    def bind(self, out: np.ndarray, x: np.ndarray):
        return functools.partial(np.copyto, out, x)


class _Move:
    """A move as the kernel of its prepared step: what the step runs where its call cannot, and
    what it tells of itself."""

    __slots__ = ("in_slots", "label", "move", "op_name", "out_slots", "what")

    def __init__(self, move: _MoveStep):
        self.move, self.in_slots, self.out_slots = move, [move.src], [move.dst]
        self.op_name, self.label, self.what = "move", "", f"move of value {move.src} to {move.dst}"

    def run(self, frame: list) -> None:
        self.move.run(frame)

    def info(self) -> StepInfo:
        return self.move.info()


class _Condition:
    """A one-value frame: what a jump reads its condition from when it is decided ahead."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __getitem__(self, slot: int):
        return self.value


_UNKNOWN = object()


def straighten(m: MethodState, steps: list, folded: dict, places: dict) -> bool:
    """Rewrite ``steps`` (a shape specialization's, in place) along the path its folded values
    decide; ``places`` holds slot → (dtype, shape) of the values the specialization gives a
    place. Returns whether it did (every jump on the path decided and forward)."""
    written = {v for s in steps for v in s.info().writes}

    def condition(slot: int):
        if slot in folded:
            return folded[slot]
        value = m._initial[slot]
        if slot in written or m._planned[slot] is not None or value is None:
            return _UNKNOWN
        return value

    path, jumps, pc, n = [], {}, 0, len(steps)
    while pc < n:
        step = steps[pc]
        if isinstance(step, _JumpStep):
            value = condition(step.cond)
            if value is _UNKNOWN:
                return False
            dest = step.run(_Condition(value))
            if dest is not None and dest <= pc:
                return False
            jumps[pc] = dest
            pc = dest if dest is not None else pc + 1
            continue
        path.append(pc)
        pc += 1
    if not jumps:
        return False
    on_path = set(path)
    for pc in range(n):
        if pc in jumps:
            steps[pc] = _Skipped(steps[pc]) if jumps[pc] is None else _Goto(jumps[pc])
        elif pc not in on_path:
            steps[pc] = _Skipped(steps[pc])
    inputs = set(m._input_slots)
    for pc in path:
        step = steps[pc]
        if type(step) is _MoveStep and step.dst not in inputs:
            dst, src = _spec(m, step.dst, places, {}), _spec(m, step.src, places, folded)
            if dst is not None and dst == src:
                prepared = steps[pc] = _PreparedStep()
                prepared.call, prepared.kernel = _MoveCopy(), _Move(step)
                prepared.in_slots, prepared.out_slot = [step.src], step.dst
    return True


def _spec(m: MethodState, slot: int, places: dict, folded: dict) -> tuple | None:
    """(dtype, shape) of a value with a place (the specialization's or the file's arena view's),
    or of a value of ``folded``."""
    if slot in folded:
        return folded[slot].dtype, folded[slot].shape
    if slot in places:
        dtype, shape = places[slot]
        return np.dtype(dtype), tuple(shape)
    view = m._planned[slot]
    return (view.dtype, view.shape) if view is not None else None
