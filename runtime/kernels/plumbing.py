"""Kernels of offload's own ops that the .pte lowering introduces (domain ``offload``)."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from . import kernel


@kernel("StackSequence", domain="offload")
def stack_sequence(ctx, input_sequence, *, dtype, shape):
    """A Loop's scan output: the per-iteration values stacked on a new axis 0.

    A loop that ran zero times has nothing to stack; its output is empty along axis 0 with the
    element type and per-iteration shape the lowering read from the IR (as the Loop kernel does).
    """
    if input_sequence:
        return np.stack(input_sequence)
    return np.zeros((0, *(shape or ())), dtype=DataType(dtype).numpy)
