"""Pooling, NCHW, float32: MaxPool / AveragePool / LpPool over 1 to 3 spatial dims and the global
pools over any number, ``kernels_cl/pool.cl``.

Pads follow ``conv.geometry`` (auto_pad from the static shapes); ceil_mode needs nothing more than
the static output shape, since windows that reach past the padded extent are clipped in the
kernel. MaxPool's Indices output is not taken (the op table allows one output).
"""

from __future__ import annotations

import math

import numpy as np

from offload.ir import DataType
from offload.ir.window_cost import check_pool_work

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, float_options, options, source
from .conv import _as3, geometry

_F32 = frozenset({DataType.FLOAT})
_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

CAPS = {
    "MaxPool": OpCapability(_F32, max_rank=5, attributes={"auto_pad": _AUTO_PAD, "storage_order": (0,)}),
    "AveragePool": OpCapability(_F32, max_rank=5, attributes={"auto_pad": _AUTO_PAD}),
    # LpPool's ceil_mode has no onnxruntime kernel to check it against: not claimed.
    "LpPool": OpCapability(_F32, max_rank=5, attributes={"auto_pad": _AUTO_PAD, "ceil_mode": (0,)}),
    "GlobalAveragePool": OpCapability(_F32, max_rank=MAX_RANK),
    "GlobalMaxPool": OpCapability(_F32, max_rank=MAX_RANK),
}
_MODE = {"MaxPool": 0, "AveragePool": 1, "LpPool": 2}


def _check(op) -> Support | None:
    rank = op.inputs[0].type.rank
    if op.op_type.startswith("Global"):
        if rank is None or rank < 3:
            return Support(False, f"{op.op_type} of rank {rank} (takes N, C and spatial dims)")
        return None
    if rank is None or not 3 <= rank <= 5:
        return Support(False, f"{op.op_type} of rank {rank} (takes 1 to 3 spatial dims)")
    ks = op.attributes.get("kernel_shape")
    if ks is None or len(ks) != rank - 2:
        return Support(False, f"{op.op_type} whose kernel_shape does not give every spatial dim")
    return None


CHECKS = dict.fromkeys(CAPS, _check)


def _pool(b: Builder, step: dict) -> None:
    a, kind = step["attributes"], step["type"]
    (x,), (out,) = step["inputs"], step["outputs"]
    (N, C, *ins), (_, _, *outs) = b.shape(x), b.shape(out)
    ks = [int(k) for k in a["kernel_shape"]]
    check_pool_work(kind, (N, C), tuple(outs), tuple(ks))  # shapes a run brings: not seen at import
    strides, dils, begin, end = geometry(a, ins, ks, outs)
    i32 = np.int32
    args = [Buf(x), Buf(out), i32(_MODE[kind]), np.float32(a.get("p", 2)), i32(N * C)]
    args += [i32(v) for v in (*_as3(ins, 1), *_as3(ks, 1), *_as3(outs, 1), *_as3(strides, 1))]
    args += [i32(v) for v in (*_as3(begin, 0), *_as3(end, 0), *_as3(dils, 1))]
    args.append(i32(a.get("count_include_pad", 0)))
    kd, kh, kw = _as3(ks, 1)
    window = f"-DPOOL_MODE={_MODE[kind]} -DPOOL_KD={kd} -DPOOL_KH={kh} -DPOOL_KW={kw}"
    program = b.program(source("pool.cl"), options(b, window))
    b.launch(program, "pool", (N * C * math.prod(outs),), None, args)


def _global_pool(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    N, C, *spatial = b.shape(x)
    args = [Buf(x), Buf(out), np.int32(step["type"] == "GlobalMaxPool"), np.int32(N * C)]
    b.launch(
        b.program(source("pool.cl"), float_options(b)),
        "global_pool",
        (N * C,),
        None,
        [*args, np.int32(math.prod(spatial))],
    )


LAUNCH = {
    **{op: _pool for op in ("MaxPool", "AveragePool", "LpPool")},
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
}
