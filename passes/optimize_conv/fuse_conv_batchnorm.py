"""optimize_conv::fuse_conv_batchnorm — fold an inference BatchNormalization into the Conv before it.

Rule: ``BatchNormalization(Conv(x, W, B), scale, bias, mean, var)`` in inference mode
(training_mode=0, only Y read), all four statistics constant, the Conv output read by nothing
else, becomes ``Conv(x, W', B')`` (the conv's output may have unknown dims: BatchNormalization
keeps its input's shape whatever it is) with, per output channel k,
``a_k = scale_k / sqrt(var_k + epsilon)``, ``W'_k = W_k · a_k``, ``B'_k = (B_k - mean_k) · a_k + bias_k``.
The arithmetic is done in float64 and rounded once to the weight dtype.

Before::

    %c: (1,8,5,5,fp32) = Conv(X=%x, W=%w, B=%b)
    %y: (1,8,5,5,fp32) = BatchNormalization(X=%c, scale=%s, B=%t, input_mean=%m, input_var=%v)

After::

    %y: (1,8,5,5,fp32) = Conv(X=%x, W=%y_w, B=%y_b)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Program

from ..pattern import Rewriter, const, same_dtype
from ..registry import graph_pass
from ._fold import batchnorm_stats, bias_of, conv_with_weights, refolded_conv


@graph_pass("optimize_conv::fuse_conv_batchnorm")
def fuse_conv_batchnorm(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    for block, conv in rw.ops():
        if not rw.alive(conv) or not conv_with_weights(conv):
            continue
        out = conv.outputs[0]
        bn = rw.only_user(out)
        if bn is None or bn.inputs[0] is not out or not same_dtype(out, bn.outputs[0]):
            continue
        stats = batchnorm_stats(bn)
        w = const(conv.inputs[1])
        channels = w.shape[0]
        if stats is None or len(stats[0]) != channels:
            continue
        a, shift, mean = stats
        new_w = (w.astype(np.float64) * a.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b = bias_of(conv, channels, w.dtype).astype(np.float64)
        new_b = ((b - mean) * a + shift).astype(w.dtype)
        fused = refolded_conv(rw, block, conv, conv.inputs[0], new_w, new_b, before=bn)
        if rw.replace_op(bn, fused):
            rw.drop(conv, bn)
            changed = True
    return changed
