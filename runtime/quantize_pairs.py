"""Load-time fusion of the CPU executor: an activation's QuantizeLinear → DequantizeLinear pair as one step.

Rule::

    q = QuantizeLinear(x, s, zp)          prepared: per tensor, float32 → int8 / uint8
    y = DequantizeLinear(q, s', zp')      prepared: per tensor, → float32; right after it

becomes one prepared step at the QuantizeLinear's place that writes y from x
(``kernels.quantize_pair.QuantizePairCall``: the two calls' float32 operations, q never
stored); the DequantizeLinear's step runs nothing (``_FusedAway``). The scales and zero points
may differ between the two ops, or be omitted.

Not fused (each op keeps its own step):

1. q has another reader than the DequantizeLinear (a second op, or a result of the method):
   it would never be written.
2. The DequantizeLinear is not the next step to run (only fused-away steps between), or a jump
   lands on it: y's arena place is only free from its own step on, and its step must run
   where q was made.
3. The DequantizeLinear's scale or zero point is not a constant: no arena place the fused step
   writes may be one it reads.
4. Either op without its prepared call (per-axis or per-block scales, a float16 x, a
   ``precision`` attribute …): the kernels' way, op by op.

Only the CPU executor fuses them, in the method's own steps and in shape specializations alike;
the graph, the .pte, ``offload.evaluate`` and the GPU backends keep both ops.
"""

from __future__ import annotations

import numpy as np

from .fusions import _fusion_context
from .kernels.quantization import _DequantizeCall, _QuantizeCall
from .kernels.quantize_pair import QuantizePairCall
from .pte_values import value_type
from .steps import MethodState, _FusedAway, _KernelPair, _KernelStep, _PreparedStep


def _fuse_quantize_pairs(m: MethodState, steps: list) -> None:
    """The rule above on ``steps`` (the method's, or a shape specialization's), changed in place."""
    readers, results, targets = _fusion_context(m, steps)
    for pc, quantize in enumerate(steps):
        if type(quantize) is not _PreparedStep or type(quantize.call) is not _QuantizeCall:
            continue
        q = pc + 1
        while q < len(steps) and type(steps[q]) is _FusedAway:
            q += 1
        if q >= len(steps):
            continue
        dequantize, mid = steps[q], quantize.out_slot
        if (
            type(dequantize) is not _PreparedStep
            or type(dequantize.call) is not _DequantizeCall
            or type(quantize.kernel) is not _KernelStep
            or type(dequantize.kernel) is not _KernelStep
            or dequantize.in_slots[0] != mid
            or readers.get(mid) != 1
            or mid in results
            or any(p in targets for p in range(pc + 1, q + 1))
            or not all(
                i and m._planned[i] is None and type(m._initial[i]) is np.ndarray
                for i in dequantize.in_slots[1:]
            )
        ):
            continue
        qtype = np.dtype(value_type(m._values[mid]).dtype.numpy)
        fused = _PreparedStep()
        fused.call = QuantizePairCall(qtype, len(quantize.in_slots))
        fused.kernel = _KernelPair(quantize.kernel, dequantize.kernel)
        fused.in_slots = fused.kernel.in_slots
        fused.out_slot = dequantize.out_slot
        steps[pc] = fused
        steps[q] = away = _FusedAway()
        away.kernel = dequantize.kernel
