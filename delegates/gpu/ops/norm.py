"""BatchNormalization (inference) and Softmax: ``kernels_cl/norm.cl``."""

from __future__ import annotations

import math

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability
from ..api import Buf, Builder, source

_F32 = frozenset({DataType.FLOAT})

CAPS = {
    "BatchNormalization": OpCapability(_F32, max_rank=6, attributes={"training_mode": (0,)}),
    "Softmax": OpCapability(_F32, max_rank=6),
}
CHECKS = {}


def _batchnorm(b: Builder, step: dict) -> None:
    x, scale, bias, mean, var = step["inputs"][:5]
    (out,) = step["outputs"][:1]
    shape = b.shape(x)
    C = shape[1] if len(shape) > 1 else 1
    inner = math.prod(shape[2:])
    n = math.prod(shape)
    eps = np.float32(step["attributes"].get("epsilon", 1e-5))
    args = [Buf(x), Buf(scale), Buf(bias), Buf(mean), Buf(var), Buf(out)]
    args += [np.int32(n), np.int32(C), np.int32(inner), eps]
    b.launch(b.program(source("norm.cl")), "batchnorm", (n,), None, args)


def _softmax(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    shape = b.shape(x) or (1,)  # a scalar: softmax of one element
    axis = int(step["attributes"].get("axis", -1)) % len(shape)
    outer, L, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    args = [Buf(x), Buf(out), np.int32(outer), np.int32(L), np.int32(inner)]
    b.launch(b.program(source("norm.cl")), "softmax", (outer * inner,), None, args)


LAUNCH = {"BatchNormalization": _batchnorm, "Softmax": _softmax}
