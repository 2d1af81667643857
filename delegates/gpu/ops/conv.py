"""Conv (2-D, NCHW): a direct kernel, ``kernels_cl/conv.cl``."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, source

_F32 = frozenset({DataType.FLOAT})

CAPS = {"Conv": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",)})}


def _check(op) -> Support | None:
    if op.inputs[0].type.rank != 4:
        return Support(False, f"Conv of rank {op.inputs[0].type.rank} (only 2-D, NCHW, is supported)")
    return None


CHECKS = {"Conv": _check}


def _conv(b: Builder, step: dict) -> None:
    a = step["attributes"]
    x, w, *rest = step["inputs"]
    bias = rest[0] if rest else None
    (out,) = step["outputs"]
    N, C, H, W = b.shape(x)
    M, _, KH, KW = b.shape(w)
    _, _, OH, OW = b.shape(out)
    SH, SW = a.get("strides") or (1, 1)
    DH, DW = a.get("dilations") or (1, 1)
    PT, PL, _, _ = a.get("pads") or (0, 0, 0, 0)
    G = int(a.get("group", 1))
    i32 = np.int32
    args = [Buf(x), Buf(w), Buf(bias) if bias is not None else Buf(out), Buf(out), i32(bias is not None)]
    args += [i32(v) for v in (N, C, H, W, M, G, KH, KW, OH, OW, SH, SW, PT, PL, DH, DW)]
    b.launch(b.program(source("conv.cl")), "conv2d", (N * M * OH * OW,), None, args)


LAUNCH = {"Conv": _conv}
