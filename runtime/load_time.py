"""Load-time steps: kernel steps of constants, computed once at a method's first run and kept."""

from __future__ import annotations

import numpy as np

from offload.ir import TensorType, computed_once

from .pte_values import value_type
from .steps import MethodState, SubPlan, _JumpStep, _KernelStep, _LoadTimeStep, _PreparedStep


def _straight_line(m: MethodState) -> tuple[int, dict[int, int], set[int]]:
    """What _find_load_time and _find_shape_steps start from: the first instruction a jump may
    reach or leave from (the steps before it run once, in order), how many steps write each
    slot, and the constants (arrays no step writes that are neither planned nor inputs)."""
    jumps = [pc for pc, s in enumerate(m._steps) if isinstance(s, _JumpStep)]
    limit = min([*jumps, *(m._steps[pc].dest for pc in jumps), len(m._steps)])
    writers: dict[int, int] = {}
    for step in m._steps:
        for slot in step.info().writes:
            writers[slot] = writers.get(slot, 0) + 1
    inputs = set(m._input_slots)
    constants = {
        i
        for i, v in enumerate(m._initial)
        if m._planned[i] is None and isinstance(v, np.ndarray) and i not in inputs and i not in writers
    }
    return limit, writers, constants


def _kernel_steps(m: MethodState, limit: int):
    """(pc, step, its kernel step, domain, op type) of the kernel steps (prepared or not) before
    ``limit``."""
    for pc in range(limit):
        step = m._steps[pc]
        kernel = step.kernel if isinstance(step, _PreparedStep) else step
        if isinstance(kernel, _KernelStep):
            domain, _, op_type = kernel.op_name.partition("::")
            yield pc, step, kernel, domain, op_type


def _find_load_time(m: MethodState) -> None:
    """The kernel steps whose inputs are all constants (or their results): deterministic ONNX
    ops (``ir.computed_once``) before the first jump, whose outputs have no arena place (the
    writer leaves them out, emit/plan.py), are tensors and are not results of the method. Such
    a step runs once, at the first run, and its results become constants: the light models'
    fully connected weights (ConstantOfShape, 151 MB) are made once, not at every run."""
    limit, writers, known = _straight_line(m)
    results = set(m._output_slots)
    found = []
    for pc, _, kernel, domain, op_type in _kernel_steps(m, limit):
        outs = [o for o in kernel.out_slots if o]
        if (
            not any(kernel.in_slots)
            or not all(i == 0 or i in known for i in kernel.in_slots)
            or not computed_once("" if domain == "onnx" else domain, op_type)
            or any(isinstance(a, SubPlan) for a in kernel.attrs.values())
            or not outs
            or any(
                m._planned[o] is not None
                or o in results
                or writers.get(o) != 1
                or not isinstance(value_type(m._values[o]), TensorType)
                for o in outs
            )
        ):
            continue
        found.append(kernel)
        known.update(outs)
        m._steps[pc] = placeholder = _LoadTimeStep()
        placeholder.kernel = kernel
    m._load_time = found or None
