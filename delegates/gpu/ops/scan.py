"""Ops that walk each line along one axis, one work-item per line (``kernels_cl/scan.cl``):
CumSum and CumProd, Hardmax, LpNormalization.

CumSum / CumProd fold each line in order, the order numpy (the ONNX reference) and onnxruntime
use, so float32 results match theirs exactly rather than within a tolerance. Their axis input
picks the launch geometry, so it is read on the host when the runtime specializes.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, ctype, options, source
from ..host import check_host_inputs

_TYPES = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64})
OPS = ("CumSum", "CumProd")

CAPS = {
    op: OpCapability(_TYPES, max_rank=MAX_RANK, attributes={"exclusive": (0, 1), "reverse": (0, 1)})
    for op in OPS
}

_F32 = frozenset({DataType.FLOAT})
CAPS["Hardmax"] = OpCapability(_F32, max_rank=MAX_RANK)
CAPS["LpNormalization"] = OpCapability(_F32, max_rank=MAX_RANK, attributes={"p": (1, 2)})


def _check(op) -> Support | None:
    x, axis = op.inputs[0], op.inputs[1] if len(op.inputs) > 1 else None
    if axis is None:
        return Support(False, f"{op.op_type} without an axis input")
    if x.type.dtype != op.outputs[0].type.dtype:
        return Support(False, f"{op.op_type} whose output dtype differs from its input's")
    if x.type.rank == 0:
        return Support(False, f"{op.op_type} of a scalar")
    if axis.type.shape is not None and math.prod(axis.type.shape) != 1:
        return Support(False, f"{op.op_type} axis is not a scalar")
    return check_host_inputs(op)


def _check_axis(op) -> Support | None:
    rank = op.inputs[0].type.rank
    axis = int(op.attributes.get("axis", -1))
    if rank == 0 or not -rank <= axis < rank:
        return Support(False, f"{op.op_type} axis {axis} of a rank-{rank} tensor")
    return None


CHECKS = {**dict.fromkeys(OPS, _check), "Hardmax": _check_axis, "LpNormalization": _check_axis}


def _lines(shape, axis: int, what: str) -> tuple[int, int, int]:
    """``shape`` viewed as [outer, L, inner] around ``axis``."""
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ModelFormatError(f"gpu backend: {what} of {shape} along axis {axis}")
    axis %= rank
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def _launch(b: Builder, step: dict) -> None:
    (x, axis_v), (out,) = step["inputs"][:2], step["outputs"]
    shape = b.shape(x)
    value = b.const(axis_v)
    if value is None or np.asarray(value).size != 1:
        raise ModelFormatError(f"gpu backend: {step['type']} axis is not a scalar known on the host")
    if b.shape(out) != shape:
        raise ModelFormatError(f"gpu backend: {step['type']} of {shape} into {b.shape(out)}")
    outer, L, inner = _lines(shape, int(np.asarray(value).reshape(-1)[0]), step["type"])
    dtype = b.dtype(x)
    opts = f"-DT={ctype(dtype)} -DIS_FLOAT={int(dtype == np.float32)} -DPROD={int(step['type'] == 'CumProd')}"
    program = b.program(source("scan.cl"), options(b, opts))
    attrs = step["attributes"]
    args = [Buf(x), Buf(out), np.int32(outer), np.int32(L), np.int32(inner)]
    args += [np.int32(attrs.get("exclusive", 0)), np.int32(attrs.get("reverse", 0))]
    b.launch(program, "cumulate", (outer * inner,), None, args)


def _launch_line(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    shape = b.shape(x)
    if b.shape(out) != shape:
        raise ModelFormatError(f"gpu backend: {step['type']} of {shape} into {b.shape(out)}")
    outer, L, inner = _lines(shape, int(step["attributes"].get("axis", -1)), step["type"])
    program = b.program(source("scan.cl"), options(b))
    args = [Buf(x), Buf(out), np.int32(outer), np.int32(L), np.int32(inner)]
    if step["type"] == "Hardmax":
        b.launch(program, "hardmax", (outer * inner,), None, args)
    else:
        b.launch(
            program, "lp_normalize", (outer * inner,), None, [*args, np.int32(step["attributes"].get("p", 2))]
        )


LAUNCH = {**dict.fromkeys(OPS, _launch), "Hardmax": _launch_line, "LpNormalization": _launch_line}
