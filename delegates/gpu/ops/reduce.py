"""Reductions (ReduceSum, ReduceMean, ReduceMax, … over any set of axes) and ArgMax / ArgMin:
``kernels_cl/reduce.cl``.

A reduction reads its input as [kept axes, reduced axes] through stride tables (adjacent axes of
the same kind merged first). When the innermost axis is reduced, one work-group folds each output
element (a tree in local memory; plain ``o * R + r`` offsets when the reduced axes are the trailing
ones); when it is kept, one work-item per output element loops, so neighbours read neighbours.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError, SpecializationError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, ctype, options, pad, source
from ..host import check_host_inputs

# Work-items of one work-group of ``reduce_rows`` (a power of two).
WG = 128

# Op type → the OP code of reduce.cl.
CODES = {
    "ReduceSum": 0,
    "ReduceMean": 1,
    "ReduceMax": 2,
    "ReduceMin": 3,
    "ReduceProd": 4,
    "ReduceL1": 5,
    "ReduceL2": 6,
    "ReduceLogSum": 7,
    "ReduceLogSumExp": 8,
    "ReduceSumSquare": 9,
}
# The value of a reduction over no element (ONNX: the identity of the combining operation).
_EMPTY = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1.0}
# Element types each reduction takes; the others are float32 only.
_INTS = {"ReduceSum", "ReduceMax", "ReduceMin"}

_F32 = frozenset({DataType.FLOAT})
_NUM = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64})

CAPS = {
    # dtypes also admit the int64 `axes` input; check_reduce limits the data's type per op.
    **{op: OpCapability(_NUM, max_rank=MAX_RANK) for op in CODES},
    **{
        op: OpCapability(_NUM, max_rank=MAX_RANK, attributes={"select_last_index": (0, 1)})
        for op in ("ArgMax", "ArgMin")
    },
}


def _axes_of(op) -> list[int] | None:
    """The constant axes of a Reduce op (attribute or input), or None when they are computed."""
    if len(op.inputs) > 1 and op.inputs[1] is not None:
        v = op.inputs[1]
        return [int(a) for a in np.asarray(v.const_value).reshape(-1)] if v.is_constant else None
    return [int(a) for a in op.attributes.get("axes", None) or []]


def check_reduce(op) -> Support | None:
    x = op.inputs[0]
    allowed = _NUM if op.op_type in _INTS else _F32
    if x.type.dtype not in allowed:
        return Support(False, f"{op.op_type} of {x.type.dtype.short} is not supported")
    axes = _axes_of(op)
    if axes is None:  # computed axes: known on the host when the runtime specializes
        return check_host_inputs(op)
    rank = x.type.rank
    if rank is None:  # learnt at specialization: the launcher checks axes and sizes then
        return None
    if any(not -rank <= a < rank for a in axes):
        return Support(False, f"{op.op_type} axes {axes} out of range for rank {rank}")
    noop = int(op.attributes.get("noop_with_empty_axes", 0))
    reduced = [a % rank for a in axes] if axes else ([] if noop else list(range(rank)))
    if _over_nothing(op.op_type, np.dtype(x.type.dtype.numpy), [x.type.shape[a] for a in reduced]):
        return Support(False, f"{op.op_type} over an empty set")
    return None


def _over_nothing(op_type: str, dtype: np.dtype, reduced_sizes) -> bool:
    """Whether a reduction over axes of ``reduced_sizes`` has no value the kernels may give: ONNX
    leaves the mean of nothing open (onnxruntime says 0, numpy NaN); the integer max / min of
    nothing has no infinity to give."""
    empty = 0 in reduced_sizes
    return empty and (op_type == "ReduceMean" or (op_type in _EMPTY and dtype != np.float32))


def check_arg(op) -> Support | None:
    x = op.inputs[0]
    if x.type.dtype != DataType.FLOAT:
        return Support(False, f"{op.op_type} of {x.type.dtype.short} is not supported")
    rank = max(x.type.rank, 1)
    axis = int(op.attributes.get("axis", 0))
    if not -rank <= axis < rank:
        return Support(False, f"{op.op_type} axis {axis} out of range for rank {x.type.rank}")
    if x.type.rank and x.type.shape[axis % rank] == 0:
        return Support(False, f"{op.op_type} along an empty axis")
    return None


CHECKS = {**dict.fromkeys(CODES, check_reduce), "ArgMax": check_arg, "ArgMin": check_arg}


def _reduced_axes(b: Builder, step: dict) -> list[int] | None:
    """The sorted axes a Reduce step folds, or None for noop_with_empty_axes with no axes."""
    x, *rest = step["inputs"]
    rank = len(b.shape(x))
    attrs = step["attributes"]
    if rest and rest[0] is not None:
        axes = b.const(rest[0])
        if axes is None:
            raise ModelFormatError(
                f"gpu backend: {step['type']} '{step.get('name')}' axes are not known on the host"
            )
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    else:
        axes = [int(a) for a in attrs.get("axes", None) or []]
    if not axes:
        return None if int(attrs.get("noop_with_empty_axes", 0)) else list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        raise ModelFormatError(f"gpu backend: {step['type']} '{step.get('name')}' axes {axes}, rank {rank}")
    return sorted({a % rank for a in axes})


def _groups(shape, reduced) -> list[tuple[int, int, bool]]:
    """(extent, element stride, reduced?) of the input's axes, size-1 axes dropped and adjacent
    axes of the same kind merged."""
    out: list[list] = []
    for d, n in enumerate(shape):
        if n == 1:
            continue
        stride = math.prod(shape[d + 1 :])
        red = d in reduced
        if out and out[-1][2] == red:
            out[-1][0] *= n
            out[-1][1] = stride
        else:
            out.append([n, stride, red])
    return [tuple(g) for g in out]


def _reduce(b: Builder, step: dict) -> None:
    x, (out,) = step["inputs"][0], step["outputs"]
    op = step["type"]
    shape = b.shape(x)
    reduced = _reduced_axes(b, step)
    if reduced is None:  # noop_with_empty_axes: the input itself
        b.alias(out, x)
        return
    if _over_nothing(op, b.dtype(x), [shape[a] for a in reduced]):
        raise SpecializationError(f"gpu backend: {op} '{step.get('name')}' over an empty set of {shape}")
    groups = _groups(shape, set(reduced))
    kept = [(n, s) for n, s, red in groups if not red]
    red = [(n, s) for n, s, r in groups if r]
    nout, R = math.prod(n for n, _ in kept), math.prod(n for n, _ in red)
    if nout != math.prod(b.shape(out)):
        raise ModelFormatError(f"gpu backend: {op} '{step.get('name')}' from {shape} to {b.shape(out)}")
    meta = pad([n for n, _ in kept], 1) + pad([s for _, s in kept], 0)
    meta += pad([n for n, _ in red], 1) + pad([s for _, s in red], 0)
    dtype = b.dtype(x)
    is_float = dtype == np.float32
    init = _EMPTY.get(op, 0.0)
    if not is_float and op in _EMPTY:  # integer max / min start from the first element's rival
        info = np.iinfo(dtype)
        init = info.min if op == "ReduceMax" else info.max
    init = dtype.type(init)
    opts = options(b, f"-DT={ctype(dtype)} -DIS_FLOAT={int(is_float)} -DOP={CODES[op]} -DWG={WG}")
    program = b.program(source("reduce.cl"), opts)
    args = [Buf(x), Buf(out), Ints(tuple(meta)), np.int64(nout), np.int64(R)]
    if groups and groups[-1][2]:  # the innermost axis is reduced: a work-group per output
        contig = int(len(red) == 1)
        b.launch(program, "reduce_rows", (nout * WG,), (WG,), [*args, np.int32(contig), init])
    else:
        b.launch(program, "reduce_items", (nout,), None, [*args, init])


def _arg(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    attrs = step["attributes"]
    shape = b.shape(x) or (1,)
    axis = int(attrs.get("axis", 0)) % len(shape)
    outer, L, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    is_float = int(b.dtype(x) == np.float32)
    program = b.program(source("reduce.cl"), options(b, f"-DT={ctype(b.dtype(x))} -DIS_FLOAT={is_float}"))
    args = [Buf(x), Buf(out), np.int64(outer), np.int64(L), np.int64(inner)]
    args += [np.int32(step["type"] == "ArgMax"), np.int32(attrs.get("select_last_index", 0))]
    b.launch(program, "arg_reduce", (outer * inner,), None, args)


LAUNCH = {**dict.fromkeys(CODES, _reduce), "ArgMax": _arg, "ArgMin": _arg}
