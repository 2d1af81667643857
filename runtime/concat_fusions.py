"""Load-time fusion of the CPU executor: a Concat copies its parts from where the copies that
made them read them."""

from __future__ import annotations

import numpy as np

from .fusions import _declared_spec, _fusion_context, _step_kernel
from .steps import MethodState, StepInfo, _FusedAway, _PreparedStep


class _GatheredKernels:
    """The kernel steps of a Concat and of the copies it gathers (``_fuse_concat_sources``),
    run one after the other where the fused call cannot run; it reads and writes as the Concat
    (the copies' steps stay in place, ``_FusedAway``)."""

    __slots__ = ("in_slots", "kernels", "op_name", "what")

    def __init__(self, kernels_: list):
        self.kernels = kernels_
        self.in_slots = list(kernels_[-1].in_slots)
        self.op_name = kernels_[-1].op_name
        self.what = " then ".join(k.what for k in kernels_)

    def run(self, frame: list) -> None:
        for k in self.kernels:
            k.run(frame)

    def info(self) -> StepInfo:
        return self.kernels[-1].info()


def _fuse_concat_sources(m: MethodState, steps: list) -> None:
    """Make a Concat copy a part straight from the source of the copy that made it
    (``kernels.concat_gathered``), where that copy is

        p = Reshape(s) / Transpose(s) / Identity(s)    one that only reshapes (``_ReshapeCall``)
        p = Where(c, x, y)                             c of one element (``_WhereCall``); c, x, y
                                                       method inputs or constants

    and p has one reader, the Concat, is no result of the method, and no jump lands between
    the two: the copy's step runs nothing (``_FusedAway``) and the Concat's step reads s (or c,
    x, y) instead of p. A streaming layer's window, Concat(Where(initialized, state, zeros),
    Reshape(newest frame)), is then two copies, not four. Only where no step between the copy
    and the Concat writes memory the source lies in (an arena place the source's last reader
    left free) and the Concat's result lies over no source but one reshaped one (its part is
    copied first: ``_GatheredConcatCall``). Only the CPU executor fuses
    them, in the method's own steps; the graph and the .pte keep the ops. ``steps`` are changed
    in place."""
    from .kernels.concat_gathered import _GatheredConcatCall
    from .kernels.tensor import _ConcatCall, _ReshapeCall
    from .kernels.where_prepared import _WhereCall

    readers, results, targets = _fusion_context(m, steps)
    writer: dict[int, int] = {}
    for pc, step in enumerate(steps):
        for slot in step.info().writes:
            writer[slot] = -1 if slot in writer else pc
    inputs = set(m._input_slots)
    for pc, step in enumerate(steps):
        concat = _step_kernel(step)
        if (
            type(step) is not _PreparedStep
            or concat is None
            or type(step.call) is not _ConcatCall
            or m._planned[step.out_slot] is None
        ):
            continue
        out_view = m._planned[step.out_slot]
        kinds, shapes, slots, gathered, overlapping = [], [], [], [], False
        for slot in step.in_slots:
            spec = _declared_spec(m, slot)
            producer_pc = writer.get(slot, -1)
            producer = steps[producer_pc] if producer_pc >= 0 else None
            kind, sources = "part", [slot]
            if (
                spec is not None
                and type(producer) is _PreparedStep
                and _step_kernel(producer) is not None
                and readers.get(slot) == 1
                and slot not in results
                and not any(p in targets for p in range(producer_pc + 1, pc + 1))
            ):
                if type(producer.call) is _ReshapeCall:
                    kind, sources = "reshaped", [producer.in_slots[0]]
                elif (
                    type(producer.call) is _WhereCall
                    and all(_read_only(m, i, inputs, writer) for i in producer.in_slots)
                    and _one_element(m, producer.in_slots[0])
                ):
                    kind, sources = "chosen", list(producer.in_slots)
                if kind != "part" and not _untouched(m, steps, sources, producer_pc, pc, writer):
                    kind, sources = "part", [slot]
                over = kind != "part" and any(_over(m, i, out_view) for i in sources)
                if over and (kind != "reshaped" or overlapping):
                    kind, sources = "part", [slot]
                overlapping = overlapping or (over and kind == "reshaped")
            if spec is None:
                break
            kinds.append(kind)
            shapes.append(spec[1])
            slots += sources
            if kind != "part":
                gathered.append(producer_pc)
        if len(kinds) != len(step.in_slots) or not gathered:
            continue
        fused = _PreparedStep()
        fused.call = _GatheredConcatCall(int(concat.attrs["axis"]), tuple(kinds), tuple(shapes))
        fused.kernel = _GatheredKernels([*(_step_kernel(steps[p]) for p in gathered), concat])
        fused.in_slots = slots
        fused.out_slot = step.out_slot
        for p in gathered:
            away = _FusedAway()
            away.kernel = _step_kernel(steps[p])
            steps[p] = away
        steps[pc] = fused


def _read_only(m: MethodState, slot: int, inputs: set, writer: dict) -> bool:
    """Whether a slot is a method input or a constant that no step writes."""
    constant = m._planned[slot] is None and type(m._initial[slot]) is np.ndarray
    return bool(slot) and (slot in inputs or constant) and slot not in writer


def _one_element(m: MethodState, slot: int) -> bool:
    spec = _declared_spec(m, slot)
    return spec is not None and spec[0] == np.bool_ and int(np.prod(spec[1])) == 1


def _over(m: MethodState, slot: int, out_view) -> bool:
    """Whether the arena view of ``slot`` lies over ``out_view``."""
    view = m._planned[slot]
    return view is not None and np.may_share_memory(view, out_view)


def _untouched(m: MethodState, steps: list, sources: list, start: int, end: int, writer) -> bool:
    """Whether the arrays of ``sources`` (slots) are as the step at ``start`` read them when the
    step at ``end`` runs: each has one writer (or none: an input, a constant) and no step between
    writes an arena view over it."""
    views = []
    for s in sources:
        if writer.get(s, 0) < 0:
            return False
        view = m._planned[s]
        if view is None:  # a constant, or an input read where it lies
            if not (s in m._input_slots or type(m._initial[s]) is np.ndarray):
                return False
            continue
        views.append(view)
    for step in steps[start + 1 : end]:
        for slot in step.info().writes:
            written = m._planned[slot]
            if written is not None and any(np.may_share_memory(written, v) for v in views):
                return False
    return True
