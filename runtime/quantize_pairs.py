"""Load-time fusion of the CPU executor: an activation's QuantizeLinear → DequantizeLinear pair as one step.

Rule::

    q = QuantizeLinear(x, s, zp)          prepared: per tensor, float32 → int8 / uint8
    ...                                   up to 6 other steps (an attention's Q, K and V pairs
                                          interleave: Q, Q, Q, DQ, DQ, DQ)
    y = DequantizeLinear(q, s', zp')      prepared: per tensor, → float32

becomes one prepared step at the QuantizeLinear's place that writes y from x
(``kernels.quantize_pair.QuantizePairCall``: the two calls' float32 operations, q never
stored); the DequantizeLinear's step runs nothing (``_FusedAway``). The scales and zero points
may differ between the two ops, or be omitted. y is then written before the steps between the
two run: in the file's arenas only where y's place shares no byte with what they read or write
(checked on the arena views); in a shape specialization's arena the fused step says that it
writes y (``_EarlyPair``), so that y's place is kept from there on.

Not fused (each op keeps its own step):

1. q has another reader than the DequantizeLinear (a second op, or a result of the method):
   it would never be written.
2. A jump lands after the QuantizeLinear up to the DequantizeLinear, or a step between is not
   a kernel call or a place that runs nothing (a jump, a move, a delegate): y must be written
   where q was.
3. y's arena place shares bytes with a value a step between reads or writes.
4. The DequantizeLinear's scale or zero point is not a constant: no arena place the fused step
   writes may be one it reads.
5. Either op without its prepared call (per-axis or per-block scales, a float16 x, a
   ``precision`` attribute …): the kernels' way, op by op.

Only the CPU executor fuses them, in the method's own steps and in shape specializations alike;
the graph, the .pte, ``offload.evaluate`` and the GPU backends keep both ops.
"""

from __future__ import annotations

import numpy as np

from .folded_values import _Folded
from .fusions import _fusion_context
from .kernels.quantization import _DequantizeCall, _QuantizeCall
from .kernels.quantize_pair import QuantizePairCall
from .pte_values import value_type
from .steps import MethodState, StepInfo, _FusedAway, _KernelPair, _KernelStep, _PreparedStep

_BETWEEN = 6  # the most steps between a QuantizeLinear and its DequantizeLinear
# Places of steps that run nothing: fused into a step before them, or held as constants of a
# shape specialization's frames (a Reshape's shape computed from input shapes)
_NOTHING_RUN = (_FusedAway, _Folded)


class _EarlyPair(_KernelPair):
    """The kernel steps of a pair fused where steps stand between its two ops: they run one after
    the other where the fused call cannot run, and the step reads what both ops read and writes
    q and y (a shape specialization's arena then keeps y's place from this step on)."""

    __slots__ = ()

    def info(self) -> StepInfo:
        first, second = self.first.info(), self.second.info()
        return first._replace(reads=first.reads + second.reads[1:], writes=first.writes + second.writes)


class _ReadsOnly:
    """A DequantizeLinear fused into an _EarlyPair, as its place tells of it: what it reads,
    nothing written (the pair wrote y before)."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: _KernelStep):
        self.kernel = kernel

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)

    def info(self) -> StepInfo:
        return self.kernel.info()._replace(writes=())


def _fuse_quantize_pairs(m: MethodState, steps: list) -> None:
    """The rule above on ``steps`` (the method's, or a shape specialization's), changed in place."""
    readers, results, targets = _fusion_context(m, steps)
    for pc, quantize in enumerate(steps):
        if type(quantize) is not _PreparedStep or type(quantize.call) is not _QuantizeCall:
            continue
        mid = quantize.out_slot
        q = _reader(steps, pc, mid)
        if q is None or readers.get(mid) != 1 or mid in results:
            continue
        dequantize = steps[q]
        if (
            type(dequantize) is not _PreparedStep
            or type(dequantize.call) is not _DequantizeCall
            or type(quantize.kernel) is not _KernelStep
            or type(dequantize.kernel) is not _KernelStep
            or dequantize.in_slots[0] != mid
            or any(p in targets for p in range(pc + 1, q + 1))
            or not all(
                i and m._planned[i] is None and type(m._initial[i]) is np.ndarray
                for i in dequantize.in_slots[1:]
            )
            or not _place_free(m, steps[pc + 1 : q], dequantize.out_slot)
        ):
            continue
        qtype = np.dtype(value_type(m._values[mid]).dtype.numpy)
        fused = _PreparedStep()
        fused.call = QuantizePairCall(qtype, len(quantize.in_slots))
        early = any(type(s) not in _NOTHING_RUN for s in steps[pc + 1 : q])
        fused.kernel = (_EarlyPair if early else _KernelPair)(quantize.kernel, dequantize.kernel)
        fused.in_slots = fused.kernel.in_slots
        fused.out_slot = dequantize.out_slot
        steps[pc] = fused
        steps[q] = away = _FusedAway()
        away.kernel = _ReadsOnly(dequantize.kernel) if early else dequantize.kernel


def _reader(steps: list, pc: int, mid: int) -> int | None:
    """The index of the first step after ``pc`` that reads ``mid``, within _BETWEEN other steps
    (those that run nothing not counted), where every step before it is a kernel call; else None."""
    between = 0
    for q in range(pc + 1, len(steps)):
        step = steps[q]
        if type(step) in _NOTHING_RUN:
            continue
        if mid in step.info().reads:
            return q
        between += 1
        if between > _BETWEEN or type(step) not in (_PreparedStep, _KernelStep):
            return None
    return None


def _place_free(m: MethodState, between: list, y: int) -> bool:
    """Whether no step ``between`` reads or writes y, and y's place in the file's arenas (if it
    has one) shares no byte with the arena views of the values they read or write (a step that
    runs nothing touches nothing)."""
    view = m._planned[y]
    for step in between:
        if type(step) in _NOTHING_RUN:
            continue
        info = step.info()
        if y in info.reads or y in info.writes:
            return False
        for v in (*info.reads, *info.writes):
            other = m._planned[v]
            if view is not None and other is not None and np.may_share_memory(other, view):
                return False
    return True
