"""Load-time fusion of the CPU executor: an int8 TFLite Conv made to read its NHWC input."""

from __future__ import annotations

import numpy as np

from .fusions import _declared_spec, _fusion_context, _step_kernel
from .steps import MethodState, _FusedAway, _KernelChain, _PreparedStep


def _fuse_nhwc_int8_convs(m: MethodState, steps: list) -> None:
    """Make the importer's Transpose of an NHWC tensor and the int8 Conv that alone reads its
    result one prepared call (``kernels.tflite_int8_nhwc``):

        t = Transpose(x, perm=[0, 3, 1, 2])            x (N, H, W, C) int8
        y = offload.tflite::Conv(t, w, b)              depthwise, or one window over all of t

    becomes one step at the Transpose's place that writes y from x (the Conv's step runs
    nothing, ``_FusedAway``): t is never written. Only where t has one reader, the Conv right
    after the Transpose (no step between them), is no result of the method and no jump lands on
    the Conv; w and b are constants (``nhwc_conv_call`` reorders them once). Only the CPU
    executor fuses them, in the method's own steps (shape specializations keep both: their
    arena places follow the steps' reads and writes); the graph and the .pte keep both ops.
    ``steps`` are changed in place.

    Not fused: another perm, a conv the NCHW calls take by several numpy calls (a 3 x 3 conv of
    group 1, a product past PRODUCT_LOOP_MACS: ``nhwc_conv_call`` says None), weights the graph
    computes, a Transpose result something else reads."""
    from .kernels.tflite_int8_nhwc import nhwc_conv_call

    readers, results, targets = _fusion_context(m, steps)
    for pc in range(len(steps) - 1):
        first, second = steps[pc], steps[pc + 1]
        transpose, conv = _step_kernel(first), _step_kernel(second)
        if type(first) is not _PreparedStep or type(second) is not _PreparedStep or None in (transpose, conv):
            continue
        if transpose.op_name != "onnx::Transpose" or conv.op_name != "offload.tflite::Conv":
            continue
        mid = first.out_slot
        if (
            [int(p) for p in transpose.attrs.get("perm") or ()] != [0, 3, 1, 2]
            or second.in_slots[0] != mid
            or readers.get(mid) != 1
            or mid in results
            or pc + 1 in targets
            or not all(
                i and m._planned[i] is None and type(m._initial[i]) is np.ndarray for i in second.in_slots[1:]
            )
        ):
            continue
        spec = _declared_spec(m, first.in_slots[0])
        if spec is None or spec[0] != np.int8 or len(spec[1]) != 4:
            continue
        w, *b = [m._initial[i] for i in second.in_slots[1:]]
        call = nhwc_conv_call(second.call, spec[1], w, b[0] if b else None)
        if call is None:
            continue
        fused = _PreparedStep()
        fused.call = call
        fused.kernel = _KernelChain([transpose, conv])
        fused.in_slots = [first.in_slots[0], *second.in_slots[1:]]
        fused.out_slot = second.out_slot
        steps[pc] = fused
        steps[pc + 1] = away = _FusedAway()
        away.kernel = conv
