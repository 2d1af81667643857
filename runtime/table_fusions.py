"""Load-time fusion of the CPU executor: elementwise ops on an 8-bit tensor made one table."""

from __future__ import annotations

import numpy as np

from .fusions import _declared_spec, _fusion_context, _step_kernel
from .steps import MethodContext, MethodState, _Frame, _FusedAway, _KernelChain, _PreparedStep

# Ops whose result for each element depends on that element alone (and on constants of one
# element, or Lookup's table), computed by IEEE-exact operations (no approximated function),
# so that their kernels give an element the same bits whatever the array around it.
ELEMENTWISE = frozenset({"offload.tflite::Lookup", "onnx::DequantizeLinear", "onnx::QuantizeLinear"})


def _fuse_8bit_tables(m: MethodState, steps: list) -> None:
    """Fold a run of two or more prepared steps of ELEMENTWISE ops into one table lookup
    (``kernels.table_prepared``):

        a = Lookup(x, table)            x int8 or uint8
        b = DequantizeLinear(a, s, z)   s, z constants of one element
        y = QuantizeLinear(b, s2, z2)

    becomes one step at the first op's place, y = T[bits of x], where T holds the ops' kernels'
    results for all 256 values of x, computed at load (the others run nothing, ``_FusedAway``).
    Only where each op reads the one before it alone, its other inputs are constants, each
    result but the last has one reader and is no result of the method, no jump lands inside,
    and every value has x's shape. Only the CPU executor folds them, in the method's own steps;
    the graph and the .pte keep the ops. ``steps`` are changed in place.

    Not folded: an op outside ELEMENTWISE (exp, log: their numpy loops may round an element
    differently in a vector and in the tail), a scale per channel (not one element), a 16-bit
    input (65,536 entries)."""
    readers, results, targets = _fusion_context(m, steps)
    pc = 0
    while pc < len(steps):
        chain = _chain(m, steps, pc, readers, results, targets)
        table = _table(m, chain) if len(chain) > 1 else None
        if table is None:
            pc += 1
            continue
        from .kernels.table_prepared import _TableCall

        fused = _PreparedStep()
        fused.call = _TableCall(table)
        fused.kernel = _KernelChain([s.kernel for s in chain])
        fused.in_slots = [chain[0].in_slots[0]]
        fused.out_slot = chain[-1].out_slot
        steps[pc] = fused
        for q in range(1, len(chain)):
            steps[pc + q] = away = _FusedAway()
            away.kernel = chain[q].kernel
        pc += len(chain)


def _chain(m: MethodState, steps: list, pc: int, readers: dict, results: set, targets: set) -> list:
    """The prepared steps of ELEMENTWISE ops from ``pc`` on, each reading the one before alone."""
    chain: list = []
    for q in range(pc, len(steps)):
        step = steps[q]
        k = _step_kernel(step)
        if type(step) is not _PreparedStep or k is None or k.op_name not in ELEMENTWISE or not step.in_slots:
            break
        if chain:
            prev = chain[-1].out_slot
            if step.in_slots[0] != prev or readers.get(prev) != 1 or prev in results or q in targets:
                break
        table = k.op_name == "offload.tflite::Lookup"
        if not all(
            i == 0
            or (
                m._planned[i] is None
                and type(m._initial[i]) is np.ndarray
                and (table or m._initial[i].size == 1)
            )
            for i in step.in_slots[1:]
        ):
            break
        chain.append(step)
    return chain


def _table(m: MethodState, chain: list) -> np.ndarray | None:
    """The ops' results for each of the 256 values of the chain's 8-bit input, in the order of
    their bits read as uint8, by the ops' kernels; None where the values are not 8-bit or of one
    shape, or a kernel refuses."""
    specs = [_declared_spec(m, chain[0].in_slots[0])] + [_declared_spec(m, s.out_slot) for s in chain]
    if any(s is None for s in specs) or len({s[1] for s in specs}) != 1:
        return None
    dtype = specs[0][0]
    if dtype.itemsize != 1 or dtype.kind not in "iu":
        return None
    frame = _Frame([None] * len(m._initial))
    frame.planned, frame.bound, frame.options, frame.profile = [None] * len(m._initial), None, None, None
    frame.shapes, frame.device_outputs = None, False
    value = np.arange(256, dtype=np.uint8).view(dtype)
    try:
        with np.errstate(all="ignore"):
            for step in chain:
                k = step.kernel
                args = [value] + [m._initial[i] if i else None for i in k.in_slots[1:]]
                value = k.fn(MethodContext(k, frame), *args, **k.attrs)
                value = value[0] if type(value) is tuple else value
    except Exception:  # the kernel's error at the run, where it names the op
        return None
    if not isinstance(value, np.ndarray) or value.shape != (256,) or value.dtype != specs[-1][0]:
        return None
    return np.ascontiguousarray(value)
