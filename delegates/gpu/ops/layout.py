"""Data movement: one strided-copy kernel (Transpose, Slice, Split, Expand, Tile, DepthToSpace,
SpaceToDepth), Concat, and copy-free view ops (any element type)."""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, broadcast_strides, move_ctype, options, pad, source
from ..host import check_host_inputs
from ..plan import MAX_ELEMENTS

_ANY = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64, DataType.BOOL})

# Views: the output shares the input's buffer. Dropout is one at inference (no mask output).
ALIASES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
STRIDED = ("Transpose", "Slice", "Split", "Expand", "Tile", "DepthToSpace", "SpaceToDepth")
MULTI_OUTPUT = ("Split", "Dropout")

CAPS = {
    **{op: OpCapability(_ANY, max_rank=MAX_RANK) for op in (*STRIDED, "Concat")},
    "DepthToSpace": OpCapability(_ANY, max_rank=4, attributes={"mode": ("DCR", "CRD")}),
    "SpaceToDepth": OpCapability(_ANY, max_rank=4, attributes={"mode": ("DCR", "CRD")}),
    # Copy-free: the output shares its input's device buffer.
    **{op: OpCapability(_ANY) for op in ALIASES},
}


def _read(v) -> bool:
    """Whether an op's output is used: read by an op or an output of its block."""
    if v.uses:
        return True
    block = getattr(v.producer, "block", None)
    return block is None or any(o is v for o in block.outputs)


def _check_alias(op) -> Support | None:
    """A view op needs the value of its shape / axes input only when its output shape is not
    static: then the runtime infers that shape from the value when it specializes."""
    if not all(v is None or v.type.is_static for v in op.outputs):
        found = check_host_inputs(op)
        if found is not None:
            return found
    if op.op_type == "Dropout":
        if len(op.outputs) > 1 and op.outputs[1] is not None and _read(op.outputs[1]):
            return Support(False, "Dropout whose mask output is read")
        mode = op.inputs[2] if len(op.inputs) > 2 else None
        if mode is not None and not (mode.is_constant and not bool(mode.const_value)):
            return Support(False, "Dropout in training mode (or a training_mode that is not a constant)")
    return None


def _check_concat(op) -> Support | None:
    if not op.inputs or any(v is None for v in op.inputs):
        return Support(False, "Concat with an absent input")
    return None


def _check_strided(op) -> Support | None:
    if op.op_type in ("DepthToSpace", "SpaceToDepth") and op.inputs[0].type.rank != 4:
        return Support(False, f"{op.op_type} of a rank-{op.inputs[0].type.rank} tensor (takes rank 4)")
    return check_host_inputs(op)


CHECKS = {
    **dict.fromkeys(ALIASES, _check_alias),
    **dict.fromkeys(STRIDED, _check_strided),
    "Concat": _check_concat,
}


def _options(b: Builder, v: int, *more: str) -> str:
    return options(b, f"-DT={move_ctype(b, v)}", *more)  # bits moved as stored (half as ushort under fp16)


def _strides(shape) -> list[int]:
    """Row-major element strides of ``shape``."""
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def merged_axes(shape: list[int], strides: list[int], wrap: list[int]) -> tuple[list, list, list]:
    """A strided copy's axes with those of size 1 dropped and neighbours merged where the input
    is read along them as along one axis (outer stride = inner stride x inner size) and neither
    wraps: ShuffleNet's channel shuffle [1, g, C/g, H, W] -> [1, C/g, g, H, W] is a 3-axis copy.
    On PoCL (2 cores) its 16 Transposes took 50 ms through six 64-bit divisions per element."""
    axes = [(n, s, w) for n, s, w in zip(shape, strides, wrap) if n != 1]
    out: list[list[int]] = []
    for n, s, w in axes:
        if out and out[-1][2] == out[-1][0] and w == n and out[-1][1] == s * n:
            out[-1] = [out[-1][0] * n, s, out[-1][0] * n]
        else:
            out.append([n, s, w])
    return [a[0] for a in out], [a[1] for a in out], [a[2] for a in out]


def strided_copy(b: Builder, x: int, out: int, shape, strides, wrap=None, offset: int = 0) -> None:
    """``out`` (viewed as ``shape``, rank ≤ 6) [j] = x[offset + Σ (j_d % wrap_d) · strides_d]."""
    shape = [int(s) for s in shape]
    if len(shape) > MAX_RANK or math.prod(shape) != math.prod(b.shape(out)):
        raise ModelFormatError(f"gpu backend: strided copy of shape {shape} into {b.shape(out)}")
    # An axis of size 1 reads index 0 only: its stride may be anything, so 0 keeps it in int32.
    strides = [0 if s == 1 else int(t) for s, t in zip(shape, strides)]
    wrap = shape if wrap is None else [max(int(w), 1) for w in wrap]
    shape, strides, wrap = merged_axes(shape, strides, wrap)
    meta = pad(shape, 1) + pad(strides, 0) + pad(wrap, 1) + [int(offset)]
    if any(abs(m) > MAX_ELEMENTS for m in meta):
        raise ModelFormatError(f"gpu backend: strided copy table {meta} exceeds int32")
    n = math.prod(shape)
    wraps = any(w != s for w, s in zip(wrap, shape))
    program = b.program(
        source("layout.cl"), _options(b, x, f"-DRANK={len(shape)}", "" if wraps else "-DNO_WRAP")
    )
    b.launch(program, "strided_copy", (n,), None, [Buf(x), Buf(out), Ints(tuple(meta)), np.int64(n)])


def _alias(b: Builder, step: dict) -> None:
    """Reshape / Flatten / Squeeze / Unsqueeze / Identity / Dropout: the output shares the input's
    buffer (a Dropout mask output, unread by construction, is left unwritten)."""
    src, out = step["inputs"][0], step["outputs"][0]
    if math.prod(b.shape(src)) != math.prod(b.shape(out)) or b.dtype(src) != b.dtype(out):
        raise ModelFormatError(f"gpu backend: {step['type']} from {b.shape(src)} to {b.shape(out)}")
    b.alias(out, src)


def _permuted(b: Builder, x: int, out: int, view, perm) -> None:
    """``x`` viewed as the row-major ``view`` and transposed by ``perm`` into ``out``."""
    strides = _strides(view)
    strided_copy(b, x, out, [view[p] for p in perm], [strides[p] for p in perm])


def _transpose(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    shape = b.shape(x)
    rank = len(shape)
    perm = step["attributes"].get("perm") or list(reversed(range(rank)))
    perm = [int(p) % rank for p in perm] if rank else []
    if sorted(perm) != list(range(rank)) or rank > MAX_RANK:
        raise ModelFormatError(f"gpu backend: Transpose perm {perm} of a rank-{rank} tensor")
    _permuted(b, x, out, shape, perm)


def _const_ints(b: Builder, v: int | None, what: str, default=None) -> list[int]:
    if v is None:
        if default is None:
            raise ModelFormatError(f"gpu backend: {what} input is missing")
        return default
    value = b.const(v)
    if value is None:
        raise ModelFormatError(f"gpu backend: {what} input is not known on the host")
    return [int(i) for i in np.asarray(value).reshape(-1)]


def _axes(axes: list[int], rank: int, what: str) -> list[int]:
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise ModelFormatError(f"gpu backend: {what} axes {axes} of a rank-{rank} tensor")
    return [a % rank for a in axes]


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice on one axis: (first index, output length), negative and out-of-range values clamped."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, max(0, -(-(end - start) // step))
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, max(0, -(-(start - end) // -step))


def _slice(b: Builder, step: dict) -> None:
    x, (out,) = step["inputs"][0], step["outputs"]
    ins = list(step["inputs"]) + [None] * (5 - len(step["inputs"]))
    shape = b.shape(x)
    rank = len(shape)
    starts = _const_ints(b, ins[1], "Slice starts")
    ends = _const_ints(b, ins[2], "Slice ends")
    axes = _axes(_const_ints(b, ins[3], "Slice axes", list(range(len(starts)))), rank, "Slice")
    steps = _const_ints(b, ins[4], "Slice steps", [1] * len(starts))
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise ModelFormatError(f"gpu backend: Slice starts {starts} ends {ends} axes {axes} steps {steps}")
    strides = _strides(shape)
    out_shape, step_strides, offset = list(shape), list(strides), 0
    for a, s, e, k in zip(axes, starts, ends, steps):
        first, length = slice_bounds(shape[a], s, e, k)
        out_shape[a] = length
        step_strides[a] = strides[a] * k
        offset += first * strides[a] if length else 0
    if tuple(out_shape) != b.shape(out):
        raise ModelFormatError(
            f"gpu backend: Slice of {shape} gives {out_shape}, the plan says {b.shape(out)}"
        )
    strided_copy(b, x, out, out_shape, step_strides, offset=offset)


def _split(b: Builder, step: dict) -> None:
    x, outs = step["inputs"][0], step["outputs"]
    shape = b.shape(x)
    axis = _axes([int(step["attributes"].get("axis", 0))], len(shape), "Split")[0]
    strides = _strides(shape)
    offset = 0
    for out in outs:
        oshape = b.shape(out)
        if len(oshape) != len(shape) or any(
            o != s for d, (o, s) in enumerate(zip(oshape, shape)) if d != axis
        ):
            raise ModelFormatError(f"gpu backend: Split of {shape} into {oshape}")
        strided_copy(b, x, out, oshape, strides, offset=offset * strides[axis])
        offset += oshape[axis]
    if offset != shape[axis]:
        raise ModelFormatError(f"gpu backend: Split outputs do not add up to {shape}")


def _expand(b: Builder, step: dict) -> None:
    x, (out,) = step["inputs"][0], step["outputs"]
    oshape = b.shape(out)
    shape = b.shape(x)
    if len(shape) > len(oshape) or any(s not in (1, o) for s, o in zip(reversed(shape), reversed(oshape))):
        raise ModelFormatError(f"gpu backend: Expand of {shape} to {oshape}")
    strided_copy(b, x, out, oshape, broadcast_strides(shape, oshape))


def _tile(b: Builder, step: dict) -> None:
    x, (out,) = step["inputs"][0], step["outputs"]
    shape = b.shape(x)
    repeats = _const_ints(b, step["inputs"][1], "Tile repeats")
    if len(repeats) != len(shape) or b.shape(out) != tuple(s * r for s, r in zip(shape, repeats)):
        raise ModelFormatError(f"gpu backend: Tile of {shape} by {repeats} into {b.shape(out)}")
    strided_copy(b, x, out, b.shape(out), _strides(shape), wrap=shape)


def _depth_to_space(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    n, c, h, w = b.shape(x)
    k = int(step["attributes"].get("blocksize", 0))
    if k < 1 or c % (k * k) or b.shape(out) != (n, c // (k * k), h * k, w * k):
        raise ModelFormatError(f"gpu backend: DepthToSpace blocksize {k} of {b.shape(x)}")
    if step["attributes"].get("mode", "DCR") == "DCR":  # channels read as [k, k, C/k²]
        _permuted(b, x, out, (n, k, k, c // (k * k), h, w), (0, 3, 4, 1, 5, 2))
    else:  # CRD: channels read as [C/k², k, k]
        _permuted(b, x, out, (n, c // (k * k), k, k, h, w), (0, 1, 4, 2, 5, 3))


def _space_to_depth(b: Builder, step: dict) -> None:
    (x,), (out,) = step["inputs"], step["outputs"]
    n, c, h, w = b.shape(x)
    k = int(step["attributes"].get("blocksize", 0))
    if k < 1 or h % k or w % k or b.shape(out) != (n, c * k * k, h // k, w // k):
        raise ModelFormatError(f"gpu backend: SpaceToDepth blocksize {k} of {b.shape(x)}")
    view = (n, c, h // k, k, w // k, k)
    if step["attributes"].get("mode", "DCR") == "DCR":  # output channels as [k, k, C]
        _permuted(b, x, out, view, (0, 3, 5, 1, 2, 4))
    else:  # CRD (opset 28): output channels as [C, k, k]
        _permuted(b, x, out, view, (0, 1, 3, 5, 2, 4))


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
        if x not in b.sliced:  # a Conv stored it in its slice already (``gpu/slices.py``)
            args = [Buf(x), Buf(out), np.int64(chunk), np.int64(oshape[axis] * inner), np.int64(offset)]
            b.launch(program, "concat_copy", (n,), None, [*args, np.int64(n)])
        offset += chunk
    if offset != oshape[axis] * inner:
        raise ModelFormatError(f"gpu backend: Concat inputs do not add up to {oshape}")


LAUNCH = {
    **dict.fromkeys(ALIASES, _alias),
    "Transpose": _transpose,
    "Slice": _slice,
    "Split": _split,
    "Expand": _expand,
    "Tile": _tile,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "Concat": _concat,
}
