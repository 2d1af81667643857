"""optimize_conv::fuse_batchnorm_conv — fold an inference BatchNormalization into the Convs after it.

Rule: ``Conv(BatchNormalization(x, scale, bias, mean, var), W, B)`` in inference mode
(training_mode=0, only Y read), all four statistics constant, the normalized value read only
by Convs (any number of them, each reading it as X, with constant weights and bias) and
returned by no block, becomes ``Conv(x, W', B')`` for each of those Convs. With, per input
channel c, ``a_c = scale_c / sqrt(var_c + epsilon)`` and ``b_c = bias_c - mean_c · a_c``, the
normalized input is ``a_c · x_c + b_c``, so ``W'[o, i, …] = W[o, i, …] · a_c`` and
``B'_o = B_o + Σ_{i, …} W[o, i, …] · b_c`` (c the input channel that W's column i reads in
o's group). The arithmetic is done in float64 and rounded once to the weight dtype.

The constant ``b_c`` only moves into the bias where every tap of the window reads the
input: a Conv with padding reads zeros at the border where the normalized input would have
been ``b_c``. Such a Conv takes the fold only when every ``b_c`` is 0.

Before::

    %n: (1,8,5,5,fp32) = BatchNormalization(X=%x, scale=%s, B=%t, input_mean=%m, input_var=%v)
    %y: (1,4,5,5,fp32) = Conv(X=%n, W=%w, B=%b, kernel_shape=[1, 1])

After::

    %y: (1,4,5,5,fp32) = Conv(X=%x, W=%y_w, B=%y_b, kernel_shape=[1, 1])

Not folded: a Conv with padding after a nonzero shift, a reader that is not such a Conv, a
statistic that is not constant, a normalized value that a block returns.
"""

from __future__ import annotations

import numpy as np

from offload.ir import Operation, Program

from ..pattern import Rewriter, const, same_dtype
from ..registry import graph_pass
from ._fold import batchnorm_stats, bias_of, conv_with_weights, refolded_conv


def _unpadded(conv: Operation) -> bool:
    pads = conv.attributes.get("pads") or []
    return conv.attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not any(pads)


def _folded(conv: Operation, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(W', B') of ``conv`` reading ``a · x + b`` per input channel; None where the shapes
    do not fit or a padded window would read the shift as zeros."""
    w = const(conv.inputs[1])
    group = int(conv.attributes.get("group", 1))
    out_ch, per_group = w.shape[0], w.shape[1]
    if w.ndim < 3 or per_group * group != len(a) or out_ch % group:
        return None
    if np.any(b) and not _unpadded(conv):
        return None
    # input channel of W[o, i]: the first channel of o's group plus i
    channel = (np.arange(out_ch) // (out_ch // group))[:, None] * per_group + np.arange(per_group)[None, :]
    spatial = (1,) * (w.ndim - 2)
    w64 = w.astype(np.float64)
    new_w = (w64 * a[channel].reshape(channel.shape + spatial)).astype(w.dtype)
    shift = (w64 * b[channel].reshape(channel.shape + spatial)).reshape(out_ch, -1).sum(axis=1)
    new_b = (bias_of(conv, out_ch, w.dtype).astype(np.float64) + shift).astype(w.dtype)
    return new_w, new_b


@graph_pass("optimize_conv::fuse_batchnorm_conv")
def fuse_batchnorm_conv(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, bn in rw.ops():
        stats = batchnorm_stats(bn) if rw.alive(bn) else None
        y = bn.outputs[0]
        if stats is None or not y.uses or rw.returned(y):
            continue
        convs = [op for op, _ in y.uses]
        if not all(
            c.block is block
            and conv_with_weights(c)
            and c.inputs[0] is y
            and y not in c.inputs[1:]
            and same_dtype(y, c.outputs[0])
            for c in convs
        ):
            continue
        a, shift, mean = stats
        folded = [_folded(c, a, shift - mean * a) for c in convs]
        if any(f is None for f in folded):
            continue
        for conv, (new_w, new_b) in zip(convs, folded):
            fused = refolded_conv(rw, block, conv, bn.inputs[0], new_w, new_b, before=conv)
            if rw.replace_op(conv, fused):
                rw.drop(conv)
                changed = True
        rw.drop(bn)
    return changed
