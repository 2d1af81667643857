"""Indexing: Gather, GatherElements, Pad and Resize kernels (``indexing.cl``, ``resize.cl``).

Out-of-range Gather / GatherElements indices (onnxruntime rejects them at run time) write 0 and
never read outside the data.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError, SpecializationError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, ctype, move_ctype, options, pad, source
from ..host import check_host_inputs

_ANY = frozenset({DataType.FLOAT, DataType.INT32, DataType.INT64, DataType.BOOL})
_INDICES = (DataType.INT32, DataType.INT64)
PAD_MODES = ("constant", "reflect", "edge", "wrap")
COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

CAPS = {
    "Gather": OpCapability(_ANY, max_rank=MAX_RANK),
    "GatherElements": OpCapability(_ANY, max_rank=MAX_RANK),
    "Pad": OpCapability(_ANY, max_rank=MAX_RANK, attributes={"mode": PAD_MODES}),
    # float32 data; INT64 is the sizes input's type.
    "Resize": OpCapability(
        frozenset({DataType.FLOAT, DataType.INT64}),
        max_rank=MAX_RANK,
        attributes={
            "mode": ("nearest", "linear"),
            "coordinate_transformation_mode": COORDINATES,
            "nearest_mode": NEAREST_MODES,
            "antialias": (0,),
            "exclude_outside": (0,),
            "keep_aspect_ratio_policy": ("stretch",),
        },
    ),
}


# Inputs that decide the output shape: read on the host when the runtime specializes (host.py).


def _check_gather(op) -> Support | None:
    if op.inputs[1].type.dtype not in _INDICES:
        return Support(False, f"{op.op_type} indices of type {op.inputs[1].type.dtype.short}")
    return None


def _check_pad(op) -> Support | None:
    if len(op.inputs) < 2 or op.inputs[1] is None:
        return Support(False, "Pad without a pads input (opset < 11)")
    found = check_host_inputs(op)
    if found is not None:
        return found
    # The limits of ``_pad_limits`` are checked on the concrete shapes and pads when the plan
    # specializes; here only where the sizes and pads are known already.
    mode = op.attributes.get("mode", "constant")
    x, y = op.inputs[0].type, op.outputs[0].type
    if mode == "constant" or x.shape is None or y.shape is None:
        return None
    pads, axes = [], []
    if mode == "reflect" and all(v is None or v.is_constant for v in op.inputs[1:4:2]):
        pads = [int(p) for p in op.inputs[1].const_value.reshape(-1)]
        given = op.inputs[3] if len(op.inputs) > 3 else None
        axes = [int(a) for a in given.const_value.reshape(-1)] if given is not None else list(range(x.rank))
    found = _pad_limits(mode, pads, axes, x.shape, y.shape)
    return None if found is None else Support(False, found)


def _pad_limits(mode: str, pads: list[int], axes: list[int], shape, oshape) -> str | None:
    """Why the kernel cannot pad ``shape`` into ``oshape`` (sizes or symbols) so, or None where the
    known sizes allow it: every mode but constant reads the input (an empty one gives nothing to
    read), and onnxruntime rejects reflecting further than once (pads of at most size - 1): so do
    we."""
    if mode != "constant" and 0 in shape and all(type(d) is int for d in oshape) and math.prod(oshape) > 0:
        return f"Pad mode {mode} of an empty tensor {list(shape)}"
    if mode == "reflect":
        for j, a in enumerate(axes):
            size = shape[a % len(shape)]
            if isinstance(size, int) and max(pads[j], pads[j + len(axes)]) >= size:
                return f"Pad reflect by {pads} of a {list(shape)} tensor (at most size - 1)"
    return None


def _present(op, i: int) -> bool:
    """Input ``i`` is given and not an empty tensor (Resize marks an unused input so)."""
    v = op.inputs[i] if i < len(op.inputs) else None
    return v is not None and not (v.is_constant and v.const_value.size == 0)


def _check_resize(op) -> Support | None:
    if op.inputs[0].type.dtype != DataType.FLOAT:
        return Support(False, f"Resize of {op.inputs[0].type.dtype.short} data (takes float32)")
    if len(op.inputs) < 3:
        return Support(False, "Resize without scales or sizes after roi (the opset-10 form)")
    found = check_host_inputs(op)
    if found is not None:
        return found
    if _present(op, 2) == _present(op, 3):
        return Support(False, "Resize takes exactly one of scales and sizes")
    mode = op.attributes.get("coordinate_transformation_mode", "half_pixel")
    if _present(op, 2) and mode in ("align_corners", "pytorch_half_pixel"):
        if not (op.inputs[2].is_constant and op.inputs[0].type.is_static and op.outputs[0].type.is_static):
            return Support(False, f"Resize {mode} with scales that are not constants")
        # These modes read the resized length; ONNX takes it as input size · scale, onnxruntime
        # as the (floored) output size: the device follows both only where the two agree.
        shape, out = op.inputs[0].type.shape, op.outputs[0].type.shape
        for a, (n, m) in enumerate(zip(shape, out)):
            if abs(n * float(_scale(op, a)) - m) > 1e-4 * max(m, 1):
                return Support(False, f"Resize {mode} where input size · scale is not an integer")
    return None


def _scale(op, axis: int) -> float:
    """The scale Resize's constant scales input gives ``axis`` (1 for an axis it leaves out)."""
    rank = len(op.inputs[0].type.shape)
    axes = [int(a) % rank for a in op.attributes.get("axes") or range(rank)]
    scales = op.inputs[2].const_value.reshape(-1)
    return float(scales[axes.index(axis)]) if axis in axes else 1.0


CHECKS = {
    "Gather": _check_gather,
    "GatherElements": _check_gather,
    "Pad": _check_pad,
    "Resize": _check_resize,
}


def _options(b: Builder, x: int, idx: int | None = None, **defines) -> str:
    # indexing.cl moves T as stored (half bits as ushort under fp16); resize.cl reads stype.
    opts = [f"-DT={move_ctype(b, x)}"]
    if idx is not None:
        opts.append(f"-DI={ctype(b.dtype(idx))}")
    opts += [f"-D{k}={v}" for k, v in defines.items()]
    return options(b, *opts)


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ModelFormatError(f"gpu backend: {what} axis {axis} of a rank-{rank} tensor")
    return axis % rank


def _gather(b: Builder, step: dict) -> None:
    (x, idx), (out,) = step["inputs"], step["outputs"]
    shape, ishape = b.shape(x), b.shape(idx)
    axis = _axis(int(step["attributes"].get("axis", 0)), len(shape), "Gather")
    if b.shape(out) != (*shape[:axis], *ishape, *shape[axis + 1 :]):
        raise ModelFormatError(f"gpu backend: Gather of {shape} by {ishape} into {b.shape(out)}")
    inner, count, n = math.prod(shape[axis + 1 :]), math.prod(ishape), math.prod(b.shape(out))
    program = b.program(source("indexing.cl"), _options(b, x, idx))
    args = [Buf(x), Buf(idx), Buf(out), np.int64(shape[axis]), np.int64(count), np.int64(inner), np.int64(n)]
    b.launch(program, "gather", (n,), None, args)


def _gather_elements(b: Builder, step: dict) -> None:
    (x, idx), (out,) = step["inputs"], step["outputs"]
    shape, ishape = b.shape(x), b.shape(idx)
    rank = len(shape)
    axis = _axis(int(step["attributes"].get("axis", 0)), rank, "GatherElements")
    if (
        len(ishape) != rank
        or b.shape(out) != ishape
        or any(i > s for d, (i, s) in enumerate(zip(ishape, shape)) if d != axis)
    ):
        raise ModelFormatError(f"gpu backend: GatherElements of {shape} by {ishape}")
    strides = [math.prod(shape[d + 1 :]) for d in range(rank)]
    meta = pad(ishape, 1) + pad(strides, 0) + [MAX_RANK - rank + axis, shape[axis]]
    n = math.prod(ishape)
    program = b.program(source("indexing.cl"), _options(b, x, idx))
    b.launch(
        program, "gather_elements", (n,), None, [Buf(x), Buf(idx), Buf(out), Ints(tuple(meta)), np.int64(n)]
    )


def _const_ints(b: Builder, v: int, what: str) -> list[int]:
    value = b.const(v)
    if value is None:
        raise ModelFormatError(f"gpu backend: {what} input is not known on the host")
    return [int(i) for i in np.asarray(value).reshape(-1)]


def _pad(b: Builder, step: dict) -> None:
    ins = list(step["inputs"]) + [None] * (4 - len(step["inputs"]))
    x, (out,) = ins[0], step["outputs"]
    shape = b.shape(x)
    rank = len(shape)
    pads = _const_ints(b, ins[1], "Pad pads")
    axes = list(range(rank)) if ins[3] is None else _const_ints(b, ins[3], "Pad axes")
    if len(pads) != 2 * len(axes) or any(not -rank <= a < rank for a in axes):
        raise ModelFormatError(f"gpu backend: Pad pads {pads} axes {axes} of a rank-{rank} tensor")
    before, oshape = [0] * rank, list(shape)
    for j, a in enumerate(axes):
        before[a % rank] = pads[j]
        oshape[a % rank] += pads[j] + pads[j + len(axes)]
    if tuple(oshape) != b.shape(out):
        raise ModelFormatError(
            f"gpu backend: Pad of {shape} by {pads} gives {oshape}, the plan says {b.shape(out)}"
        )
    found = _pad_limits(step["attributes"].get("mode", "constant"), pads, axes, shape, oshape)
    if found is not None:
        raise SpecializationError(f"gpu backend: {found}")
    mode = PAD_MODES.index(step["attributes"].get("mode", "constant"))
    value = ins[2]
    if value is not None and math.prod(b.shape(value)) != 1:
        raise ModelFormatError(f"gpu backend: Pad constant_value of shape {b.shape(value)}")
    meta = pad(oshape, 1) + pad(shape, 1) + pad(before, 0)
    n = math.prod(oshape)
    program = b.program(source("indexing.cl"), _options(b, x, MODE=mode))
    # Without a constant_value the kernel never reads `value`; any buffer of the step binds it.
    args = [Buf(x), Buf(out), Buf(out if value is None else value), np.int32(value is not None)]
    b.launch(program, "pad", (n,), None, [*args, Ints(tuple(meta)), np.int64(n)])


def _resize(b: Builder, step: dict) -> None:
    ins = list(step["inputs"]) + [None] * (4 - len(step["inputs"]))
    x, (out,) = ins[0], step["outputs"]
    attrs = step["attributes"]
    shape, oshape = b.shape(x), b.shape(out)
    rank = len(shape)
    axes = [_axis(int(a), rank, "Resize") for a in attrs.get("axes") or range(rank)]
    scales = [np.float32(1.0)] * rank
    given = [b.const(v) if v is not None else None for v in ins[2:4]]
    if given[0] is not None and given[0].size:
        for a, s in zip(axes, np.asarray(given[0], np.float32).reshape(-1)):
            scales[a] = s
    else:  # sizes: onnxruntime's float32 ratio of output to input size
        for a in axes:
            scales[a] = np.float32(oshape[a]) / np.float32(shape[a]) if shape[a] else np.float32(1.0)
    if len(oshape) != rank or any(s <= 0 for s in scales):
        raise ModelFormatError(f"gpu backend: Resize of {shape} to {oshape} by scales {scales}")
    opts = _options(
        b,
        x,
        CTM=COORDINATES.index(attrs.get("coordinate_transformation_mode", "half_pixel")),
        LINEAR=int(attrs.get("mode", "nearest") == "linear"),
        NEAREST=NEAREST_MODES.index(attrs.get("nearest_mode", "round_prefer_floor")),
    )
    meta = pad(oshape, 1) + pad(shape, 1)
    n = math.prod(oshape)
    program = b.program(source("resize.cl"), opts)
    scale_args = [np.float32(s) for s in pad(scales, 1.0)]
    b.launch(program, "resize", (n,), None, [Buf(x), Buf(out), Ints(tuple(meta)), *scale_args, np.int64(n)])


LAUNCH = {"Gather": _gather, "GatherElements": _gather_elements, "Pad": _pad, "Resize": _resize}
