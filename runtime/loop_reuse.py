"""Products in a loop's body that reuse the last trip's result while their operands hold the same bits.

A decoder exported with its Loop carrying every tensor it needs, the encoder's features among
them, passes those through its body unchanged (Unsqueeze then Squeeze, and a move back into the
carried value), and projects them again at each trip: PaddleOCR's table recognizer (SLANet)
multiplies its [1, 256, 96] features by a [96, 256] weight at each of its ~500 decoding steps,
0.2-0.7 ms a trip, a quarter of the model's time. Whether such a value is the same from trip to
trip follows from the values, not from the chain (the carried slot is written at every trip), so
it is checked at run time:

a MatMul or Gemm of a loop's body that a shape specialization prepared (``loop_steps._LoopStep``),
with operands that are not constants large enough and little beside its work (``reused``), keeps, after a trip that computed it into its arena view, the bytes of its operands that are
not constants and the run (the frame) they belong to. A later trip of the same run whose operands
hold the same bytes leaves the view as it is: the product of the same bits is the same bits
(the same call on the same arrays). Comparing bytes costs ~6 us for those features against the
product's 200+; a trip whose operands changed computes as before. The view keeps the result
between trips: a loop value's place is reserved from the loop's first step to the end of the
chain, and the step is its one writer (``loop_steps.loop_candidates``). A run that took the
kernel's way (operands of other types) keeps nothing.
"""

from __future__ import annotations

from math import prod

import numpy as np

from .steps import StepInfo

# A loop's product keeps its operands where the comparison that may save it is cheap beside it:
# operands that are not constants of at least REUSE_ELEMENTS elements in all (below that the
# checks cost about as much as the call: a decoder's [1, 256] state by a weight), and at least
# REUSE_WORK multiply-adds for each of their elements (an attention's [1, 256, 256] energies
# by a [256, 1] weight change at every trip and cost no more than their comparison).
REUSE_ELEMENTS = 4096
REUSE_WORK = 16


class _ReusedLoopStep:
    """A ``_LoopStep`` that skips a trip whose operands hold the bytes of the last trip of the
    same run (module docstring). Never bound (a bound call runs at every trip); its result is
    in its arena view after every trip, as the _LoopStep's is (``results_in_view``)."""

    __slots__ = ("kept", "step")
    results_in_view = True

    def __init__(self, step):
        self.step = step
        self.kept: tuple | None = None  # (the run's frame, the operands' bytes); replaced whole

    @property
    def out_slot(self) -> int:
        return self.step.out_slot

    @property
    def kernel(self):
        return self.step.kernel

    def run(self, frame: list) -> None:
        step = self.step
        varying = [frame[step.in_slots[k]] for k, _, _ in step.checks]
        kept = self.kept
        if (
            kept is not None
            and kept[0] is frame
            and frame[step.out_slot] is frame.planned[step.out_slot]
            and all(_same(a, b) for a, b in zip(varying, kept[1]))
        ):
            return None
        step.run(frame)
        self.kept = None
        if frame[step.out_slot] is frame.planned[step.out_slot] and all(
            type(a) is np.ndarray and a.flags.c_contiguous for a in varying
        ):
            self.kept = (frame, [(a.dtype, a.shape, a.tobytes()) for a in varying])
        return None

    def info(self) -> StepInfo:
        return self.step.info()


def _same(a, kept: tuple) -> bool:
    """Whether ``a`` is a C-contiguous array of the kept (dtype, shape, bytes)."""
    dtype, shape, data = kept
    return (
        type(a) is np.ndarray
        and a.dtype == dtype
        and a.shape == shape
        and a.flags.c_contiguous
        and a.tobytes() == data
    )


def _depth(op_name: str, attrs: dict, a_shape: tuple) -> int | None:
    """The length of the products' sums (K) of a MatMul or Gemm whose first operand has
    ``a_shape``; None for another op."""
    if op_name == "onnx::MatMul" and a_shape:
        return a_shape[-1]
    if op_name == "onnx::Gemm" and len(a_shape) == 2:
        return a_shape[0] if attrs.get("transA") else a_shape[1]
    return None


def reused(step, specs: list, out_shape: tuple):
    """``step`` (a _LoopStep with its inputs' (dtype, shape) ``specs`` and its output's shape)
    as a _ReusedLoopStep where its op is a product whose operands that are not constants are
    large and little beside its work (``REUSE_ELEMENTS``, ``REUSE_WORK``); else ``step``."""
    depth = _depth(step.kernel.op_name, step.kernel.attrs, tuple(specs[0][1]) if specs else ())
    varying = sum(prod(shape) for _, _, shape in step.checks)
    if depth is None or not step.checks or varying < REUSE_ELEMENTS:
        return step
    if prod(out_shape) * depth < REUSE_WORK * varying:
        return step
    return _ReusedLoopStep(step)
