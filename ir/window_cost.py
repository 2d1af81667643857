"""What a sliding-window op (a convolution or a pool) builds and does before it runs, refused
past its budget with a ``ShapeError`` naming the op.

Three things are bounded, from the input's size and the op's attributes:

1. the padded input a kernel builds (at four bytes an element): pads of 131,072 or a dilation of
   65,536 make it terabytes over an 8 x 8 input, while the result may stay small;
2. the result (the same four bytes an element);
3. for a pool, the work: its window is an attribute alone, so a ``kernel_shape`` of 60,000 x
   60,000 over a padded input asks for 3.6e9 window taps per output. Work counts one element
   step per tap and output, plus ``STEP_COST`` per tap, which is what one numpy call over a
   tap costs beside its elements (measured: 6 us a call, 0.3-1 ns an element). A convolution's
   taps come from its weight, a tensor the file must hold, so its work is bounded by the file.

Type inference checks these from declared shapes at import (``check_declared``), before any
pass or kernel runs; the CPU kernels check them again from the sizes a run brings
(``check_window_cost``), where inference saw symbolic dims, and a GPU plan checks its pools'
work when it specializes to new shapes (``check_pool_work``).
"""

from __future__ import annotations

import math

from offload.errors import ShapeError

from . import budget
from . import types as _types
from .types import TensorType

ELEMENT_BYTES = 4  # the kernels pad and compute in float32 (or wider): bytes an element, at least
STEP_COST = 1 << 14  # element steps one numpy call over a window tap costs beside its elements

# (domain, op type) → (input index of x, input index of the weight or None, whether it is a pool)
WINDOW_OPS = {
    ("", "Conv"): (0, 1, False),
    ("", "ConvInteger"): (0, 1, False),
    ("", "QLinearConv"): (0, 3, False),
    ("", "MaxPool"): (0, None, True),
    ("", "AveragePool"): (0, None, True),
    ("", "LpPool"): (0, None, True),
    ("offload.tflite", "Conv"): (0, 1, False),
    ("offload.tflite", "AveragePool"): (0, None, True),
}


def check_window_cost(op: str, lead: tuple, padded: tuple, out: tuple, kernel: tuple, pool: bool, limit: int):
    """Refuse a window op over ``lead`` (batch, channels) whose padded input (``padded``
    spatial sizes) or result (``out``) passes ``limit`` bytes, or, for a pool, whose work
    passes the window-work budget."""
    for what, spatial in ((" (padded input)", padded), ("", out)):
        shape = (*lead, *spatial)
        nbytes = math.prod(shape) * ELEMENT_BYTES
        if nbytes > limit:
            raise ShapeError(
                f"{op}{what}: a result of shape {shape} would take {nbytes} bytes, over the {limit}-byte "
                f"limit ({budget.TENSOR.explain(limit)})"
            )
    if pool:
        check_pool_work(op, lead, out, kernel)


def check_pool_work(op: str, lead: tuple, out: tuple, kernel: tuple) -> None:
    """Refuse a pool whose windows (``kernel``) over ``lead`` x ``out`` outputs pass the
    window-work budget (a GPU pool, which pads nothing, checks only this)."""
    taps, outputs = math.prod(kernel), math.prod((*lead, *out))
    work, limit = taps * (outputs + STEP_COST), budget.WINDOW_WORK.value
    if work > limit:
        raise ShapeError(
            f"{op}: a window of {taps} taps ({' x '.join(map(str, kernel))}) over {outputs} outputs would "
            f"take {work} element steps, over the limit of {limit} ({budget.WINDOW_WORK.explain(limit)})"
        )


def check_declared(op, attrs: dict) -> None:
    """``check_window_cost`` for a window op whose input and output shapes are static, from its
    attributes (``attrs`` with the schema's defaults); nothing for other ops or unknown sizes."""
    entry = WINDOW_OPS.get((op.domain, op.op_type))
    if entry is None or not op.outputs:
        return
    x, y = _static(op, entry[0]), op.outputs[0].type
    if x is None or len(x) < 3 or not isinstance(y, TensorType) or not y.is_static or len(y.shape) != len(x):
        return
    w = _static(op, entry[1]) if entry[1] is not None else None
    kernel = _ints(attrs.get("kernel_shape")) or (tuple(w[2:]) if w is not None else None)
    nd = len(x) - 2
    if kernel is None or len(kernel) != nd:
        return
    padded = _padded(x[2:], kernel, attrs)
    if padded is None:
        return
    name = f"{op.op_type} '{op.name or op.outputs[0].name}'"
    check_window_cost(
        name, tuple(x[:2]), padded, tuple(y.shape[2:]), kernel, entry[2], _types.MAX_TENSOR_BYTES
    )


def _static(op, i: int) -> tuple | None:
    if i >= len(op.inputs) or op.inputs[i] is None:
        return None
    t = op.inputs[i].type
    return tuple(t.shape) if isinstance(t, TensorType) and t.is_static else None


def _ints(values) -> tuple | None:
    if not values or not all(isinstance(v, int) for v in values):
        return None
    return tuple(values)


def _padded(size: tuple, kernel: tuple, attrs: dict) -> tuple | None:
    """The padded input's spatial sizes: the explicit pads, or the SAME rule's total padding."""
    nd = len(size)
    strides = _ints(attrs.get("strides")) or (1,) * nd
    dilations = _ints(attrs.get("dilations")) or (1,) * nd
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if len(strides) != nd or len(dilations) != nd or min(strides + dilations) < 1:
        return None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(
            max(i, (-(-i // s) - 1) * s + (k - 1) * d + 1)
            for i, k, s, d in zip(size, kernel, strides, dilations)
        )
    if auto_pad == "VALID":
        return tuple(size)
    pads = _ints(attrs.get("pads")) or (0,) * (2 * nd)
    if len(pads) != 2 * nd or min(pads) < 0:
        return None
    return tuple(i + b + e for i, b, e in zip(size, pads[:nd], pads[nd:]))
