"""Data movement: Transpose and Concat kernels (any element type), and copy-free view ops."""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, ctype, pad, source

_ANY = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64, DataType.BOOL})

ALIASES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")

CAPS = {
    "Transpose": OpCapability(_ANY, max_rank=MAX_RANK),
    "Concat": OpCapability(_ANY, max_rank=MAX_RANK),
    # Copy-free: the output shares its input's device buffer (the shape / axes input must be a constant).
    **{op: OpCapability(_ANY) for op in ALIASES},
}


def _check_alias(op) -> Support | None:
    if any(v is not None and not v.is_constant for v in op.inputs[1:]):
        return Support(False, f"{op.op_type} with a shape / axes input that is not a constant")
    return None


def _check_concat(op) -> Support | None:
    if not op.inputs or any(v is None for v in op.inputs):
        return Support(False, "Concat with an absent input")
    return None


CHECKS = {**dict.fromkeys(ALIASES, _check_alias), "Concat": _check_concat}


def _options(b: Builder, v: int) -> str:
    return f"-DT={ctype(b.dtype(v))}"


def _alias(b: Builder, step: dict) -> None:
    """Reshape / Flatten / Squeeze / Unsqueeze / Identity: the output shares the input's buffer."""
    src, (out,) = step["inputs"][0], step["outputs"]
    if math.prod(b.shape(src)) != math.prod(b.shape(out)) or b.dtype(src) != b.dtype(out):
        raise ModelFormatError(f"gpu backend: {step['type']} from {b.shape(src)} to {b.shape(out)}")
    b.alias(out, src)


def _transpose(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    shape = b.shape(x)
    rank = len(shape)
    perm = step["attributes"].get("perm") or list(reversed(range(rank)))
    perm = [int(p) % rank for p in perm] if rank else []
    if sorted(perm) != list(range(rank)) or rank > MAX_RANK:
        raise ModelFormatError(f"gpu backend: Transpose perm {perm} of a rank-{rank} tensor")
    in_strides = [math.prod(shape[d + 1 :]) for d in range(rank)]
    meta = pad([shape[p] for p in perm], 1) + pad([in_strides[p] for p in perm], 0)
    n = math.prod(shape)
    program = b.program(source("layout.cl"), _options(b, x))
    b.launch(program, "transpose", (n,), None, [Buf(x), Buf(out), Ints(tuple(meta)), np.int32(n)])


def _concat(b: Builder, step: dict) -> None:
    (out,) = step["outputs"]
    oshape = b.shape(out)
    axis = int(step["attributes"].get("axis", 0)) % len(oshape)
    inner = math.prod(oshape[axis + 1 :])
    program = b.program(source("layout.cl"), _options(b, out))
    offset = 0
    for x in step["inputs"]:
        xs = b.shape(x)
        chunk = xs[axis] * inner
        n = math.prod(xs)
        args = [Buf(x), Buf(out), np.int32(chunk), np.int32(oshape[axis] * inner), np.int32(offset)]
        b.launch(program, "concat_copy", (n,), None, [*args, np.int32(n)])
        offset += chunk
    if offset != oshape[axis] * inner:
        raise ModelFormatError(f"gpu backend: Concat inputs do not add up to {oshape}")


LAUNCH = {**dict.fromkeys(ALIASES, _alias), "Transpose": _transpose, "Concat": _concat}
