"""Values a partition can compute once at init: Shape, Size, ConstantOfShape.

Shapes are static inside a partition, so these ops never launch a kernel: the launcher hands the
value to the builder (``b.constant``), which uploads it once with the weights. This keeps shape
arithmetic and ConstantOfShape weights (as in ONNX's light models) on the device side of a
partition instead of cutting it in pieces.
"""

from __future__ import annotations

import math

import numpy as np

from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Builder
from ..host import check_host_inputs
from ..plan import attribute

_ANY = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64, DataType.BOOL})

CAPS = {
    "Shape": OpCapability(_ANY),
    "Size": OpCapability(_ANY),
    "ConstantOfShape": OpCapability(_ANY),
}


# Inputs that decide the output shape: read on the host when the runtime specializes (host.py).


def _check_constant_of_shape(op) -> Support | None:
    return check_host_inputs(op)


CHECKS = {"ConstantOfShape": _check_constant_of_shape}


def _shape(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    a = step["attributes"]
    dims = b.shape(x)[int(a.get("start", 0)) : a.get("end")]  # slicing clamps as ONNX says
    b.constant(out, np.array(dims, np.int64))


def _size(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    b.constant(out, np.array(math.prod(b.shape(x)), np.int64))


def _constant_of_shape(b: Builder, step: dict) -> None:
    (out,) = step["outputs"]
    value = attribute(step["attributes"].get("value", {"array": [0.0], "dtype": "float32", "shape": [1]}))
    b.constant(out, np.full(b.shape(out), value.ravel()[0], b.dtype(out)))


LAUNCH = {"Shape": _shape, "Size": _size, "ConstantOfShape": _constant_of_shape}
