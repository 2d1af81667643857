"""Ops whose values follow from each element's index: Range and Trilu (``kernels_cl/generate.cl``).

Range's start / limit / delta decide its length, so they are read on the host when the runtime
specializes (``host.host_input_names``); Trilu's k only selects elements and is read by the kernel itself.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, ctype, move_ctype, options, source
from ..host import check_host_inputs

_RANGE = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64})
# Trilu only moves elements: every type a buffer holds.
_TRILU = frozenset(
    {
        DataType.FLOAT, DataType.INT32, DataType.INT64, DataType.BOOL, DataType.INT8,
        DataType.INT16, DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
    }
)  # fmt: skip

CAPS = {
    "Range": OpCapability(_RANGE, max_rank=1),
    "Trilu": OpCapability(_TRILU, max_rank=MAX_RANK, attributes={"upper": (0, 1)}),
}

# Inputs that decide the output shape: read on the host when the runtime specializes (host.py).


def _check_range(op) -> Support | None:
    if len({v.type.dtype for v in [*op.inputs, *op.outputs]}) != 1:
        return Support(False, "Range whose start, limit, delta and output differ in dtype")
    # a dim the compiler cannot see (a symbol) is checked by the launcher, which needs one value
    sizes = [[d for d in v.type.shape if isinstance(d, int)] for v in op.inputs]
    if any(v.type.rank > 1 or math.prod(s) != 1 for v, s in zip(op.inputs, sizes)):
        return Support(False, "Range of inputs that are not scalars")
    return check_host_inputs(op)


def _check_trilu(op) -> Support | None:
    if op.inputs[0].type.rank < 2:
        return Support(False, f"Trilu of a rank-{op.inputs[0].type.rank} tensor (takes rank ≥ 2)")
    return None


CHECKS = {"Range": _check_range, "Trilu": _check_trilu}


def _scalar(b: Builder, v: int, what: str):
    value = b.const(v)
    if value is None or np.asarray(value).size != 1:
        raise ModelFormatError(f"gpu backend: Range {what} is not a scalar known on the host")
    return np.asarray(value).reshape(-1)[0]


def _range(b: Builder, step: dict) -> None:
    (start, _limit, delta), (out,) = step["inputs"], step["outputs"]
    dtype = b.dtype(out)
    (n,) = b.shape(out)
    is_float = dtype == np.float32
    program = b.program(source("generate.cl"), options(b, f"-DT={ctype(dtype)} -DIS_FLOAT={int(is_float)}"))
    first, step_ = (dtype.type(_scalar(b, v, w)) for v, w in ((start, "start"), (delta, "delta")))
    b.launch(program, "range", (n,), None, [Buf(out), first, step_, np.int32(n)])


def _trilu(b: Builder, step: dict) -> None:
    ins, (out,) = step["inputs"], step["outputs"]
    x, k = ins[0], ins[1] if len(ins) > 1 else None
    shape = b.shape(x)
    if len(shape) < 2 or b.shape(out) != shape:
        raise ModelFormatError(f"gpu backend: Trilu of {shape} into {b.shape(out)}")
    if k is not None and (math.prod(b.shape(k)) != 1 or b.dtype(k) != np.int64):
        raise ModelFormatError(f"gpu backend: Trilu k of {b.dtype(k)}{list(b.shape(k))}")
    n = math.prod(shape)
    program = b.program(source("generate.cl"), options(b, f"-DM={move_ctype(b, x)}"))
    # Without k the kernel never reads it: any buffer of the step binds the argument.
    args = [Buf(x), Buf(out), Buf(x if k is None else k), np.int32(k is not None)]
    args += [np.int32(step["attributes"].get("upper", 1)), np.int32(shape[-2]), np.int32(shape[-1])]
    b.launch(program, "trilu", (n,), None, [*args, np.int32(n)])


LAUNCH = {"Range": _range, "Trilu": _trilu}
