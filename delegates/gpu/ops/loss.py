"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (float32), ``kernels_cl/loss.cl``.

Both read their input as [N, C, D] (any rank from 2: the axes after C flattened into D) and the
target as [N, D]. SoftmaxCrossEntropyLoss is a LogSoftmax along C (into its log_prob output, or a
scratch buffer when that output is absent) followed by NegativeLogLikelihoodLoss.

reduction=none writes one loss per element. sum and mean fold every element in one work-group:
each work-item adds a fixed stride of elements in order, then a tree adds the partial sums, so a
result never depends on scheduling. mean divides by the sum of the selected weights (ONNX: the
weights of the elements that are not ignored; their count without a weight input), which is
also what onnxruntime does; the ONNX reference divides by every element when ignore_index is -1
and there is no weight input, against its own spec.

A target class outside [0, C) that is not the ignore_index (onnxruntime rejects it at run time)
reads nothing and gives a NaN loss.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, Scratch, ctype, options, source

# Work-items of the one work-group that folds a sum or mean (a power of two).
WG = 128
OPS = ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
REDUCTIONS = ("none", "sum", "mean")

# float32 scores and weights; the target's type is checked apart. No rank limit: the kernels
# see [N, C, D] only.
_TYPES = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64})
CAPS = {op: OpCapability(_TYPES, attributes={"reduction": REDUCTIONS}) for op in OPS}
# SoftmaxCrossEntropyLoss may list its log_prob output.
MULTI_OUTPUT = ("SoftmaxCrossEntropyLoss",)


def _check(op) -> Support | None:
    x, target = op.inputs[0], op.inputs[1]
    weight = op.inputs[2] if len(op.inputs) > 2 else None
    if x.type.dtype != DataType.FLOAT:
        return Support(False, f"{op.op_type} of {x.type.dtype.short} scores (takes float32)")
    if target.type.dtype not in (DataType.INT32, DataType.INT64):
        return Support(False, f"{op.op_type} target of type {target.type.dtype.short}")
    if x.type.rank < 2:
        return Support(False, f"{op.op_type} of a rank-{x.type.rank} input (takes [N, C, ...])")
    if target.type.rank != x.type.rank - 1:
        return Support(
            False, f"{op.op_type} target of rank {target.type.rank} for a rank-{x.type.rank} input"
        )
    if weight is not None and (weight.type.dtype != DataType.FLOAT or weight.type.rank != 1):
        return Support(
            False, f"{op.op_type} weight of type {weight.type.dtype.short}, rank {weight.type.rank}"
        )
    return None


CHECKS = dict.fromkeys(OPS, _check)


def _launch(b: Builder, step: dict) -> None:
    x, target, *rest = step["inputs"]
    weight = rest[0] if rest else None
    out, *more = step["outputs"]
    log_prob = more[0] if more else None
    op, attrs = step["type"], step["attributes"]
    shape, tshape = b.shape(x), b.shape(target)
    if len(shape) < 2 or tshape != (shape[0], *shape[2:]):
        raise ModelFormatError(f"gpu backend: {op} of {shape} with a target of {tshape}")
    N, C, D = shape[0], shape[1], math.prod(shape[2:])
    if weight is not None and b.shape(weight) != (C,):
        raise ModelFormatError(f"gpu backend: {op} of {C} classes with a weight of {b.shape(weight)}")
    reduction = attrs.get("reduction", "mean")
    want = tshape if reduction == "none" else ()
    if b.shape(out) != want:
        raise ModelFormatError(f"gpu backend: {op} reduction={reduction} into {b.shape(out)}")
    program = b.program(source("loss.cl"), options(b, f"-DI={ctype(b.dtype(target))} -DWG={WG}"))
    scores: Buf | Scratch = Buf(x)
    if op == "SoftmaxCrossEntropyLoss":
        if log_prob is not None and b.shape(log_prob) != shape:
            raise ModelFormatError(f"gpu backend: {op} log_prob of {b.shape(log_prob)} for {shape}")
        scores = Buf(log_prob) if log_prob is not None else Scratch(N * C * D * 4, "log_prob")
        geometry = [np.int64(N), np.int64(C), np.int64(D)]
        b.launch(program, "log_softmax_lines", (N * D,), None, [Buf(x), scores, *geometry])
    ignore = attrs.get("ignore_index")
    # Without a weight input the kernel never reads `weight`; the scores fill the argument.
    args = [scores, Buf(target), Buf(weight) if weight is not None else scores, np.int32(weight is not None)]
    args += [Buf(out), np.int64(N * D), np.int64(C), np.int64(D)]
    args += [np.int64(0 if ignore is None else ignore), np.int32(ignore is not None)]
    if reduction == "none":
        b.launch(program, "nll_elements", (N * D,), None, args)
    else:
        b.launch(program, "nll_reduce", (WG,), (WG,), [*args, np.int32(reduction == "mean")])


LAUNCH = dict.fromkeys(OPS, _launch)
