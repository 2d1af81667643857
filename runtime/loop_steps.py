"""Prepared steps inside loops: the kernel steps of a lowered Loop's body that a shape specialization prepares.

A Loop lowered into the chain (emit/plan.py: its body between the jump that leaves it and the
jump back) runs each body step once a trip. Shape specializations (shape_specializations.py)
prepare only the steps before the first jump, whose values' shapes follow from the input
shapes; a loop's steps each stayed a kernel, which allocates its result and checks its inputs
again at every trip (10-60 us of Python for ops of a few hundred floats: most of a decoder's
time). Inside a loop a value's shape may change from trip to trip (a sequence that grows) or
depend on data, so it cannot be derived. Instead, the run that notes a specialization notes the
type of every value a loop step writes or reads at each write (``shape_specializations._note``):
a value with one dtype and one shape at all its writes is *steady*.

A kernel step past the first jump (``loop_candidates``) becomes a _LoopStep of the
specialization when its op has a prepared call and one output, its output and inputs are
steady or constants, and its output's shape follows from its inputs' shapes alone
(``ir.shape_rules``; an op whose output shape depends on input values only where those are
constants: Reshape to a constant shape, Squeeze of constant axes). Each trip it checks that its
inputs are C-contiguous arrays of the noted types and calls the prepared call into its place in
the specialization's arena, the same place at every trip; inputs of other types (a later run
whose trips differ) take the kernel's way, as a _PreparedStep's do (a kernel result of another
type unbinds the rest of the run). Its runs of steps whose inputs are certain are bound like
the others (``bound_runs``).

Buffers are safe to reuse across trips because a loop value's place is reserved from the
loop's first step to the end of the chain (``shape_specializations._spans``), so no other value
shares its bytes while the loop may run again, and because a value moved into a slot with no
place of its own (a carried value, a sequence of scan values) is copied out of the arena by the
move (``Method._store``): the next trip's write never changes a value that lives on.
"""

from __future__ import annotations

import numpy as np

from offload.ir import shape_rules

from . import kernels
from .instructions import _one_output, _prepared_outputs
from .loop_reuse import reused
from .steps import (
    MethodState,
    SubPlan,
    _JumpStep,
    _KernelStep,
    _PreparedOutputsStep,
    _PreparedStep,
)


def loop_candidates(m: MethodState, limit: int, writers: dict[int, int]) -> list[int]:
    """The kernel steps from ``limit`` on (past the first jump, where a backward jump may run
    them again) that a specialization may make _LoopSteps: an op with a prepared call and one
    output, or a prepared call of several outputs (``kernels.prepared_outputs``), that only this
    step writes, neither inputs nor results of the method, whose output shapes follow from its inputs' shapes and the values of
    constants (``loop_step`` checks those are constants once they are known: a load-time result
    is one), and whose inputs are all given."""
    if not any(isinstance(s, _JumpStep) and s.dest <= pc for pc, s in enumerate(m._steps)):
        return []  # no loop: forward jumps only
    inputs, results = set(m._input_slots), set(m._output_slots)
    found = []
    for pc in range(limit, len(m._steps)):
        step = m._steps[pc]
        if type(step) is not _KernelStep or not step.in_slots:
            continue
        domain, _, op_type = step.op_name.partition("::")
        domain = "" if domain == "onnx" else domain
        out = _one_output(step)
        outs = [o for o in step.out_slots if o]
        if out is not None:
            has_call = kernels.find_prepared(domain, op_type) is not None
        else:
            has_call = kernels.find_prepared_outputs(domain, op_type) is not None and len(outs) > 1
        if (
            not has_call
            or any(writers.get(o) != 1 or o in inputs or o in results for o in outs)
            or (out is None and any(m._planned[o] is not None for o in outs))
            or not all(step.in_slots)
            or any(isinstance(a, SubPlan) for a in step.attrs.values())
        ):
            continue
        from_shapes, from_values = shape_rules(domain)
        if op_type in from_shapes or op_type in from_values:
            found.append(pc)
    return found


def loop_notes(m: MethodState, limit: int) -> set[int]:
    """The slots whose types the noting run notes for _LoopSteps: those that the steps from
    ``limit`` on write or read (what writes them before the loop notes them too)."""
    slots: set[int] = set()
    for step in m._steps[limit:]:
        info = step.info()
        slots.update(info.reads)
        slots.update(info.writes)
    return slots


def _constant(m: MethodState, i: int, writers: dict[int, int]) -> bool:
    return (
        m._planned[i] is None
        and type(m._initial[i]) is np.ndarray
        and i not in m._input_slots
        and i not in writers
    )


def loop_step(
    m: MethodState, kernel: _KernelStep, seen, writers: dict[int, int]
) -> tuple[_LoopStep | _LoopOutputsStep | None, dict[int, tuple]]:
    """``kernel`` (a ``loop_candidates`` step) as a _LoopStep (or _LoopOutputsStep) for the types
    ``seen`` noted, and the types of the outputs it needs places for; None where a type is not
    steady or the op has no prepared call for them."""
    outs = [o for o in kernel.out_slots if o]
    if any(o not in seen or o in seen.varied for o in outs):
        return None, {}
    domain, _, op_type = kernel.op_name.partition("::")
    from_shapes, from_values = shape_rules(domain)
    if op_type not in from_shapes and not all(
        _constant(m, kernel.in_slots[k], writers) for k in from_values[op_type] if k < len(kernel.in_slots)
    ):
        return None, {}  # the output's shape depends on a value that may change from trip to trip
    specs, checks = [], []
    for k, i in enumerate(kernel.in_slots):
        if _constant(m, i, writers):
            specs.append((m._initial[i].dtype, m._initial[i].shape))
            continue
        if i not in seen or i in seen.varied:
            return None, {}
        specs.append(seen[i])
        checks.append((k, np.dtype(seen[i][0]), tuple(seen[i][1])))
    if _one_output(kernel) is None:
        several = _prepared_outputs(m, kernel, specs, {o: seen[o] for o in outs})
        if several is None:
            return None, {}
        step = _LoopOutputsStep()
        step.call, step.in_slots, step.kernel = several.call, several.in_slots, kernel
        step.out_slots, step.wanted = several.out_slots, several.wanted
        step.checks = tuple(checks)
        return step, {o: seen[o] for o, w in zip(step.out_slots, step.wanted) if w}
    out = outs[0]
    view = m._planned[out]  # the file's place, where it has one (a static type)
    spec = seen[out] if view is None else (view.dtype, view.shape)
    call = kernels.find_prepared("" if domain == "onnx" else domain, op_type)(kernel.attrs, specs, spec)
    if call is None:
        return None, {}
    step = _LoopStep()
    step.call, step.in_slots, step.kernel, step.out_slot = call, list(kernel.in_slots), kernel, out
    step.checks = tuple(checks)
    return reused(step, specs, tuple(spec[1])), ({out: spec} if view is None else {})


def _fit(args: list, checks: tuple) -> bool:
    """Whether the inputs at the checked positions are C-contiguous arrays of the noted types."""
    for k, dtype, shape in checks:
        a = args[k]
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
            return False
    return True


class _LoopStep(_PreparedStep):
    """A prepared call in a loop's body (the module's docstring): the inputs that are not
    constants checked against the types the noting run saw (``checks``: position, dtype,
    shape) before the call writes into the output's arena view; else the kernel's way."""

    __slots__ = ("checks",)
    # A kernel result of another layout is copied into the view and the steps after read the
    # view: bound or not, they see the same arrays, and a later trip's product runs on the
    # layout of the others.
    keeps_layout = False

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        out = frame.planned[self.out_slot]
        if not _fit(args, self.checks):
            return self._by_kernel(frame, out)
        try:
            self.call(out, *args)
        except Exception:  # a failure the kernel names
            return self._by_kernel(frame, out)
        frame[self.out_slot] = out
        return None


class _LoopOutputsStep(_PreparedOutputsStep):
    """A prepared call of several outputs in a loop's body (Split): its inputs checked as a
    _LoopStep's are before the call writes the outputs that steps read into their arena views;
    else the kernel's way (its results copied into the views where they fit: ``Method._store``)."""

    __slots__ = ("checks",)

    def run(self, frame: list) -> None:
        args = [frame[i] for i in self.in_slots]
        if not _fit(args, self.checks):
            return self.kernel.run(frame)
        return _PreparedOutputsStep.run(self, frame)
