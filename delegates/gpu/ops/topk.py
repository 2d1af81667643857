"""TopK: the k largest (or smallest) elements along an axis and their indices, ``kernels_cl/topk.cl``.

Each element finds its own rank in its line (O(L) per element, O(L²) per line, no sort and no
shared state), so the result does not depend on scheduling: equal values come out by lower index
first, as ONNX asks. The output is always sorted, which ``sorted=0`` (order left open) allows too.
k decides the output shape, so it is read on the host when the runtime specializes.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import Buf, Builder, ctype, options, source
from ..host import check_host_inputs

_VALUES = frozenset(
    {
        DataType.FLOAT, DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64,
        DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
    }
)  # fmt: skip
# No rank limit: the kernel sees [outer, L, inner] only. INT64 is also K's and the indices' type.
CAPS = {"TopK": OpCapability(_VALUES, attributes={"largest": (0, 1), "sorted": (0, 1)})}
MULTI_OUTPUT = ("TopK",)


def _check(op) -> Support | None:
    x = op.inputs[0]
    if len(op.inputs) < 2 or op.inputs[1] is None:
        return Support(False, "TopK with k as an attribute (opset < 10)")
    if len(op.outputs) != 2 or any(v is None for v in op.outputs):
        return Support(False, "TopK without its values or indices output")
    if op.outputs[0].type.dtype != x.type.dtype:
        return Support(False, "TopK whose values differ in dtype from its input")
    if op.outputs[1].type.dtype != DataType.INT64:
        return Support(False, f"TopK indices of type {op.outputs[1].type.dtype.short}")
    rank = x.type.rank
    axis = int(op.attributes.get("axis", -1))
    if rank == 0 or not -rank <= axis < rank:
        return Support(False, f"TopK axis {axis} of a rank-{rank} tensor")
    return check_host_inputs(op)


CHECKS = {"TopK": _check}


def _launch(b: Builder, step: dict) -> None:
    (x, k_v), (values, indices) = step["inputs"][:2], step["outputs"]
    shape, attrs = b.shape(x), step["attributes"]
    rank = len(shape)
    axis = int(attrs.get("axis", -1))
    k = b.const(k_v)
    if k is None or np.asarray(k).size != 1 or not -rank <= axis < rank:
        raise ModelFormatError(
            f"gpu backend: TopK of {shape} along {axis} with k not a scalar known on the host"
        )
    k, axis = int(np.asarray(k).reshape(-1)[0]), axis % rank
    outer, L, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    want = (*shape[:axis], k, *shape[axis + 1 :])
    if not 0 <= k <= L or b.shape(values) != want or b.shape(indices) != want:
        raise ModelFormatError(f"gpu backend: TopK k={k} along axis {axis} of {shape}")
    if k == 0:
        return
    dtype = b.dtype(x)
    opts = options(b, f"-DT={ctype(dtype)} -DIS_FLOAT={int(dtype == np.float32)}")
    args = [Buf(x), Buf(values), Buf(indices), np.int64(outer), np.int64(L), np.int64(inner)]
    args += [np.int64(k), np.int32(attrs.get("largest", 1))]
    b.launch(b.program(source("topk.cl"), opts), "top_k", (outer * L * inner,), None, args)


LAUNCH = {"TopK": _launch}
