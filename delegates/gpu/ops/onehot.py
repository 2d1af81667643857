"""Tensors of two values placed by index: OneHot and EyeLike, ``kernels_cl/onehot.cl``.

OneHot's depth decides its output shape, so it is read on the host when the runtime specializes;
its off / on values stay on the device. EyeLike reads only its input's shape.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, ctype, move_ctype, options, source
from ..host import check_host_inputs

_INTS = frozenset(
    {
        DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64,
        DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
    }
)  # fmt: skip
_ANY = _INTS | {DataType.FLOAT, DataType.BOOL}
# The types OneHot's indices and depth may have.
_INDEX = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64})

CAPS = {"OneHot": OpCapability(_ANY, max_rank=MAX_RANK), "EyeLike": OpCapability(_ANY, max_rank=2)}


def _check_one_hot(op) -> Support | None:
    idx, depth, values = op.inputs[:3]
    for v, name in ((idx, "indices"), (depth, "depth")):
        if v.type.dtype not in _INDEX:
            return Support(False, f"OneHot {name} of type {v.type.dtype.short}")
    if values.type.dtype != op.outputs[0].type.dtype:
        return Support(False, "OneHot whose output differs in dtype from its values")
    rank = idx.type.rank
    axis = int(op.attributes.get("axis", -1))
    if not -rank - 1 <= axis <= rank:
        return Support(False, f"OneHot axis {axis} of rank-{rank} indices")
    return check_host_inputs(op)


def _check_eye_like(op) -> Support | None:
    if op.inputs[0].type.rank != 2:
        return Support(False, f"EyeLike of a rank-{op.inputs[0].type.rank} tensor (takes rank 2)")
    return None


CHECKS = {"OneHot": _check_one_hot, "EyeLike": _check_eye_like}


def _one_hot(b: Builder, step: dict) -> None:
    (idx, depth_v, values), (out,) = step["inputs"], step["outputs"]
    ishape = b.shape(idx)
    rank = len(ishape)
    axis = int(step["attributes"].get("axis", -1))
    depth = b.const(depth_v)
    if depth is None or np.asarray(depth).size != 1 or not -rank - 1 <= axis <= rank:
        raise ModelFormatError(f"gpu backend: OneHot of {ishape} with a depth not known on the host")
    depth, axis = int(np.asarray(depth).reshape(-1)[0]), axis % (rank + 1)
    if (
        depth < 0
        or b.shape(out) != (*ishape[:axis], depth, *ishape[axis:])
        or math.prod(b.shape(values)) != 2
    ):
        raise ModelFormatError(
            f"gpu backend: OneHot of {ishape}, depth {depth}, axis {axis} into {b.shape(out)}"
        )
    n = math.prod(b.shape(out))
    if n == 0:
        return
    is_float = b.dtype(idx) == np.float32
    opts = f"-DT={move_ctype(b, values)} -DIDX={ctype(b.dtype(idx))} -DIDX_FLOAT={int(is_float)}"
    args = [Buf(idx), Buf(values), Buf(out), np.int64(depth), np.int64(math.prod(ishape[axis:])), np.int64(n)]
    b.launch(b.program(source("onehot.cl"), options(b, opts)), "one_hot", (n,), None, args)


def _eye_like(b: Builder, step: dict) -> None:
    out = step["outputs"][0]
    shape = b.shape(out)
    if len(shape) != 2 or b.shape(step["inputs"][0]) != shape:
        raise ModelFormatError(f"gpu backend: EyeLike of {b.shape(step['inputs'][0])} into {shape}")
    n = math.prod(shape)
    if n == 0:
        return
    dtype = b.dtype(out)
    opts = options(b, f"-DT={ctype(dtype)} -DIS_FLOAT={int(dtype == np.float32)}")
    args = [Buf(out), np.int64(shape[1]), np.int64(step["attributes"].get("k", 0)), np.int64(n)]
    b.launch(b.program(source("onehot.cl"), opts), "eye_like", (n,), None, args)


LAUNCH = {"OneHot": _one_hot, "EyeLike": _eye_like}
