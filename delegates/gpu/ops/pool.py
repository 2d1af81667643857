"""Max / average / global pooling (2-D, NCHW): ``kernels_cl/pool.cl``."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, source

_F32 = frozenset({DataType.FLOAT})

CAPS = {
    "MaxPool": OpCapability(
        _F32, max_rank=4, attributes={"auto_pad": ("NOTSET",), "ceil_mode": (0,), "storage_order": (0,)}
    ),
    "AveragePool": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",), "ceil_mode": (0,)}),
    "GlobalAveragePool": OpCapability(_F32, max_rank=4),
    "GlobalMaxPool": OpCapability(_F32, max_rank=4),
}


def _check(op) -> Support | None:
    if op.inputs[0].type.rank != 4:
        return Support(False, f"{op.op_type} of rank {op.inputs[0].type.rank} (only 2-D, NCHW, is supported)")
    dil = op.attributes.get("dilations")
    if dil is not None and any(int(d) != 1 for d in dil):
        return Support(False, "pooling with dilations other than 1 is not supported")
    return None


CHECKS = dict.fromkeys(CAPS, _check)


def _pool(b: Builder, step: dict) -> None:
    a, kind = step["attributes"], step["type"]
    (x,), (out,) = step["inputs"], step["outputs"]
    N, C, H, W = b.shape(x)
    _, _, OH, OW = b.shape(out)
    if kind.startswith("Global"):
        (KH, KW), (SH, SW), pads, cip = (H, W), (1, 1), (0, 0, 0, 0), 0
    else:
        KH, KW = a["kernel_shape"]
        SH, SW = a.get("strides") or (1, 1)
        pads = a.get("pads") or (0, 0, 0, 0)
        cip = int(a.get("count_include_pad", 0))
    is_max = int(kind in ("MaxPool", "GlobalMaxPool"))
    PT, PL, PB, PR = pads
    args = [Buf(x), Buf(out)]
    args += [np.int32(v) for v in (is_max, N * C, H, W, OH, OW, KH, KW, SH, SW, PT, PL, PB, PR, cip)]
    b.launch(b.program(source("pool.cl")), "pool2d", (N * C * OH * OW,), None, args)


LAUNCH = dict.fromkeys(CAPS, _pool)
