"""What the conv fusions share: the per-output-channel view of a constant operand."""

from __future__ import annotations

import numpy as np

from offload.ir import Block, Operation, Value

from ..pattern import Rewriter, const, is_float, rank, same_dtype


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


def batchnorm_stats(bn: Operation) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For an inference BatchNormalization (training_mode=0, only Y read) with four constant
    statistics of one length: (a, shift, mean) in float64, ``a = scale / sqrt(var + epsilon)``;
    None otherwise."""
    if bn.op_type != "BatchNormalization" or bn.domain:
        return None
    if bn.attributes.get("training_mode", 0) or any(o.uses for o in bn.outputs[1:]):
        return None
    stats = [const(v) for v in bn.inputs[1:5]]
    if any(s is None for s in stats):
        return None
    scale, shift, mean, var = (s.astype(np.float64).reshape(-1) for s in stats)
    if not len(scale) == len(shift) == len(mean) == len(var):
        return None
    return scale / np.sqrt(var + float(bn.attributes.get("epsilon", 1e-5))), shift, mean


def refolded_conv(
    rw: Rewriter, block: Block, conv: Operation, x: Value, w: np.ndarray, b: np.ndarray, before: Operation
) -> Operation:
    """A Conv of ``conv``'s attributes reading ``x`` with the new constants ``w`` and ``b``, put
    before ``before`` and named after ``conv``'s output."""
    out = conv.outputs[0]
    inputs = [x, rw.constant(block, w, stem=f"{out.name}_w"), rw.constant(block, b, stem=f"{out.name}_b")]
    return rw.build(block, "Conv", inputs, dict(conv.attributes), before=before, stem=out.name)
