"""What the linear fusions share: a constant added to (or subtracted from) a 2-D product."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offload.ir import Operation, Value

from ..pattern import Rewriter, const, same_type, static_shape


@dataclass
class Bias:
    """``op`` computes ``sign · product + c`` from the product; ``c`` broadcasts to its shape."""

    op: Operation
    c: np.ndarray
    sign: int  # -1 for c - product


def bias_after(rw: Rewriter, product: Value) -> Bias | None:
    """The Add or Sub reading ``product`` (its only reader) with a constant of the product's
    dtype that Gemm's C can take: it broadcasts to the 2-D product's shape without changing it."""
    user = rw.only_user(product)
    if user is None or user.op_type not in ("Add", "Sub") or user.domain or len(user.inputs) != 2:
        return None
    first = user.inputs[0] is product
    c = const(user.inputs[1] if first else user.inputs[0])
    shape = static_shape(product)
    if c is None or shape is None or len(shape) != 2 or c.ndim > 2 or c.dtype != product.type.dtype.numpy:
        return None
    if not same_type(product, user.outputs[0]):
        return None  # the constant broadcasts the product to a larger shape
    if user.op_type == "Sub":
        return Bias(user, -c, 1) if first else Bias(user, c, -1)
    return Bias(user, c, 1)
