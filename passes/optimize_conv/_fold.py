"""What the conv fusions share: the per-output-channel view of a constant operand."""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Value

from ..pattern import const, is_float, rank, same_dtype


def conv_with_weights(op: Operation) -> bool:
    """A float Conv (not ConvTranspose) with constant weights, and a constant bias if any."""
    if op.op_type != "Conv" or op.domain or not is_float(op.outputs[0]):
        return False
    w = op.inputs[1]
    b = op.inputs[2] if len(op.inputs) > 2 else None
    return const(w) is not None and (b is None or const(b) is not None)


def per_channel(c: Value, conv_out: Value, result: Value) -> np.ndarray | None:
    """The constant ``c`` as a vector over the conv's output channels (axis 1), when ``c`` only
    varies along that axis (a scalar, (C,1,1), (1,C,1,1) …) and the elementwise op's
    ``result`` has the conv output's dtype and rank. Such a ``c`` broadcasts to the conv
    output's shape whatever its other dims are (unknown ones included), so the result has
    that shape; the number of channels must be known."""
    a = const(c)
    r = rank(conv_out)
    if a is None or r is None or not same_dtype(conv_out, result) or a.ndim > r or rank(result) != r:
        return None
    channels = conv_out.type.shape[1]
    if not isinstance(channels, int):
        return None
    shape = (1,) * (r - a.ndim) + a.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(a.reshape(-1), (channels,)).astype(conv_out.type.dtype.numpy)


def bias_of(op: Operation, channels: int, dtype) -> np.ndarray:
    b = op.inputs[2] if len(op.inputs) > 2 else None
    return np.zeros(channels, dtype) if b is None else const(b)
