"""Index-driven scatters and gathers: ScatterElements, ScatterND and GatherND, ``kernels_cl/scatter.cl``.

A scatter copies its data into the output, then gives each work-item a set of output elements no
other work-item touches (a line along the axis for ScatterElements, one position within the
slices for ScatterND) and applies the updates that land there in the order of the ONNX reference.
So duplicate indices combine deterministically under every reduction (float sums included), and
reduction=none keeps the last update, as the reference and onnxruntime do.

Out-of-range indices (onnxruntime rejects them at run time) never reach outside a buffer: a
scatter skips the update, GatherND writes 0.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, ctype, move_ctype, options, pad, source

_NUM = frozenset(
    {
        DataType.FLOAT, DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64,
        DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
    }
)  # fmt: skip
_ANY = _NUM | {DataType.BOOL}
_INDICES = (DataType.INT32, DataType.INT64)
# The reduction attribute → the OP code of scatter.cl.
REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}

CAPS = {
    "ScatterElements": OpCapability(_ANY, max_rank=MAX_RANK, attributes={"reduction": tuple(REDUCTIONS)}),
    # No rank limit: the kernels see the index rows and the slices only.
    "ScatterND": OpCapability(_ANY, attributes={"reduction": tuple(REDUCTIONS)}),
    "GatherND": OpCapability(_ANY),
}


def _check_scatter(op) -> Support | None:
    data, idx, updates = op.inputs[:3]
    if idx.type.dtype not in _INDICES:
        return Support(False, f"{op.op_type} indices of type {idx.type.dtype.short}")
    if updates.type.dtype != data.type.dtype:
        return Support(False, f"{op.op_type} whose updates differ in dtype from its data")
    reduction = op.attributes.get("reduction", "none")
    if reduction != "none" and data.type.dtype == DataType.BOOL:
        return Support(False, f"{op.op_type} reduction={reduction} of bool data")
    rank = data.type.rank
    if op.op_type == "ScatterElements":
        axis = int(op.attributes.get("axis", 0))
        if rank == 0 or not -rank <= axis < rank or idx.type.rank != rank:
            return Support(False, f"ScatterElements axis {axis} of a rank-{rank} tensor")
    elif idx.type.rank == 0:
        return Support(False, "ScatterND of scalar indices")
    return None


def _check_gather_nd(op) -> Support | None:
    if op.inputs[1].type.dtype not in _INDICES:
        return Support(False, f"GatherND indices of type {op.inputs[1].type.dtype.short}")
    if op.inputs[1].type.rank == 0:
        return Support(False, "GatherND of scalar indices")
    return None


CHECKS = {"ScatterElements": _check_scatter, "ScatterND": _check_scatter, "GatherND": _check_gather_nd}


def _strides(shape) -> list[int]:
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def _scatter_program(b: Builder, step: dict, data: int, idx: int):
    """Copies ``data`` into the output; the program of the scatter kernel."""
    out, n = step["outputs"][0], math.prod(b.shape(data))
    if b.shape(out) != b.shape(data):
        raise ModelFormatError(f"gpu backend: {step['type']} of {b.shape(data)} into {b.shape(out)}")
    copy = b.program(source("scatter.cl"), options(b, f"-DT={move_ctype(b, data)} -DI={ctype(b.dtype(idx))}"))
    if n:
        b.launch(copy, "copy", (n,), None, [Buf(data), Buf(out), np.int64(n)])
    dtype = b.dtype(data)
    op = REDUCTIONS[step["attributes"].get("reduction", "none")]
    opts = f"-DT={ctype(dtype)} -DI={ctype(b.dtype(idx))} -DIS_FLOAT={int(dtype == np.float32)} -DOP={op}"
    return b.program(source("scatter.cl"), options(b, opts))


def _scatter_elements(b: Builder, step: dict) -> None:
    (data, idx, updates), out = step["inputs"], step["outputs"][0]
    shape, ishape = b.shape(data), b.shape(idx)
    rank = len(shape)
    axis = int(step["attributes"].get("axis", 0))
    if (
        not -rank <= axis < rank
        or len(ishape) != rank
        or b.shape(updates) != ishape
        or any(i > s for d, (i, s) in enumerate(zip(ishape, shape)) if d != axis % rank)
    ):
        raise ModelFormatError(f"gpu backend: ScatterElements of {shape} by {ishape} along axis {axis}")
    axis %= rank
    program = _scatter_program(b, step, data, idx)
    if math.prod(ishape) == 0:
        return
    meta = pad(ishape, 1) + pad(_strides(shape), 0) + [MAX_RANK - rank + axis, shape[axis]]
    lines = math.prod(ishape) // ishape[axis]
    args = [Buf(idx), Buf(updates), Buf(out), Ints(tuple(meta)), np.int64(lines)]
    b.launch(program, "scatter_elements", (lines,), None, args)


def _scatter_nd(b: Builder, step: dict) -> None:
    (data, idx, updates), out = step["inputs"], step["outputs"][0]
    shape, ishape = b.shape(data), b.shape(idx)
    K = ishape[-1]
    if not 1 <= K <= len(shape) or b.shape(updates) != (*ishape[:-1], *shape[K:]):
        raise ModelFormatError(f"gpu backend: ScatterND of {shape} by indices {ishape}")
    program = _scatter_program(b, step, data, idx)
    M, S = math.prod(ishape[:-1]), math.prod(shape[K:])
    if M == 0 or S == 0:
        return
    meta = list(shape[:K]) + _strides(shape)[:K]
    args = [Buf(idx), Buf(updates), Buf(out), Ints(tuple(meta)), np.int64(M), np.int32(K), np.int64(S)]
    b.launch(program, "scatter_nd", (S,), None, args)


def _gather_nd(b: Builder, step: dict) -> None:
    (data, idx), (out,) = step["inputs"], step["outputs"]
    shape, ishape = b.shape(data), b.shape(idx)
    batch = int(step["attributes"].get("batch_dims", 0))
    K = ishape[-1] if ishape else 0
    if (
        not ishape
        or ishape[:batch] != shape[:batch]
        or not 0 <= batch < len(ishape)
        or batch + K > len(shape)
        or b.shape(out) != (*ishape[:-1], *shape[batch + K :])
    ):
        raise ModelFormatError(f"gpu backend: GatherND of {shape} by {ishape}, batch_dims {batch}")
    n = math.prod(b.shape(out))
    if n == 0:
        return
    within = shape[batch:]
    M, S, X = math.prod(ishape[batch:-1]), math.prod(shape[batch + K :]), math.prod(within)
    meta = list(within[:K]) + _strides(within)[:K]
    program = b.program(
        source("scatter.cl"), options(b, f"-DT={move_ctype(b, data)} -DI={ctype(b.dtype(idx))}")
    )
    args = [Buf(data), Buf(idx), Buf(out), Ints(tuple(meta) or (0,)), np.int64(M), np.int32(K), np.int64(S)]
    b.launch(program, "gather_nd", (n,), None, [*args, np.int64(X), np.int64(n)])


LAUNCH = {"ScatterElements": _scatter_elements, "ScatterND": _scatter_nd, "GatherND": _gather_nd}
