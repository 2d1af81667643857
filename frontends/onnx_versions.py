"""Rewrites of older ONNX operator versions into the canonical (latest) form.

Each entry says: an op of this type, imported under an opset older than ``before``, is
rewritten by ``fn``. A rewrite gets the node's inputs and attributes and a builder, and
returns the values standing for the node's outputs (or None: import the op as it is, with
the attributes it mutated in place).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from offload.errors import DTypeError, ModelFormatError, ShapeError
from offload.ir import Block, DataType, TensorType

_UPGRADES: dict[str, list[tuple[int, Callable]]] = {}


def _since(*ops: str, before: int):
    def wrap(fn):
        for op in ops:
            _UPGRADES.setdefault(op, []).append((before, fn))
        return fn

    return wrap


def _attr_to_input(name: str, position: int, dtype=np.int64):
    """An attribute that later versions take as an input at ``position``."""

    def rewrite(b, op_type, inputs, attrs, n_out):
        if name in attrs:
            value = attrs.pop(name)
            while len(inputs) < position:
                inputs.append(None)
            inputs.insert(position, b.const(value, dtype))
        return None

    return rewrite


_since("Squeeze", "Unsqueeze", "ReduceSum", before=13)(_attr_to_input("axes", 1))
_since(
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    before=18,
)(_attr_to_input("axes", 1))
_since("TopK", before=10)(_attr_to_input("k", 1))
_since("Reshape", before=5)(_attr_to_input("shape", 1))


@_since("Split", before=13)
def _split(b, op_type, inputs, attrs, n_out):
    if attrs.get("split"):
        inputs.append(b.const(attrs.pop("split")))
    else:
        attrs.pop("split", None)
        attrs["num_outputs"] = n_out


@_since("Split", before=18)
def _split_outputs(b, op_type, inputs, attrs, n_out):
    if len(inputs) < 2 or inputs[1] is None:
        attrs["num_outputs"] = n_out


@_since("Clip", before=11)
def _clip(b, op_type, inputs, attrs, n_out):
    lo, hi = attrs.pop("min", None), attrs.pop("max", None)
    inputs.append(None if lo is None else b.const(lo, np.float32))
    inputs.append(None if hi is None else b.const(hi, np.float32))


@_since("Pad", before=11)
def _pad(b, op_type, inputs, attrs, n_out):
    pads = attrs.pop("pads", attrs.pop("paddings", None))
    value = attrs.pop("value", 0.0)
    inputs.append(b.const(pads))
    inputs.append(b.const(value, np.float32))


@_since("Slice", before=10)
def _slice(b, op_type, inputs, attrs, n_out):
    starts, ends = attrs.pop("starts"), attrs.pop("ends")
    inputs += [b.const(starts), b.const(ends)]
    if "axes" in attrs:
        inputs.append(b.const(attrs.pop("axes")))


@_since("Dropout", before=12)
def _dropout(b, op_type, inputs, attrs, n_out):
    ratio = attrs.pop("ratio", 0.5)
    attrs.pop("is_test", None)
    inputs.append(b.const(ratio, np.float32))


@_since("BatchNormalization", before=9)
def _batchnorm_legacy(b, op_type, inputs, attrs, n_out):
    for legacy in ("spatial", "is_test", "consumed_inputs"):
        attrs.pop(legacy, None)


@_since("BatchNormalization", before=14)
def _batchnorm_outputs(b, op_type, inputs, attrs, n_out):
    # Before 14 the extra outputs were saved statistics of training; inference has none.
    return None


@_since("Concat", before=4)
def _concat(b, op_type, inputs, attrs, n_out):
    attrs.setdefault("axis", 1)


@_since("Cast", before=6)
def _cast(b, op_type, inputs, attrs, n_out):
    if isinstance(attrs.get("to"), str):
        attrs["to"] = int(DataType[attrs["to"].upper()])


@_since("Softmax", "LogSoftmax", "Hardmax", before=13)
def _coerce_2d(b, op_type, inputs, attrs, n_out):
    """Before 13 these ops flattened the input to 2-D at ``axis`` and normalized each row."""
    axis = attrs.pop("axis", 1)
    (x,) = inputs[:1]
    flat = b.op("Flatten", [x], {"axis": axis})[0]
    y = b.op(op_type, [flat], {"axis": -1})[0]
    shape = b.op("Shape", [x])[0]
    return b.op("Reshape", [y, shape])


@_since("Upsample", before=10**6)
def _upsample(b, op_type, inputs, attrs, n_out):
    mode = attrs.pop("mode", "nearest")
    if "scales" in attrs:
        scales = b.const(attrs.pop("scales"), np.float32)
    elif len(inputs) > 1:
        scales = inputs[1]
    else:
        h, w = attrs.pop("height_scale", 1.0), attrs.pop("width_scale", 1.0)
        scales = b.const([1.0, 1.0, h, w], np.float32)
    return b.op(
        "Resize",
        [inputs[0], None, scales],
        {
            "mode": "linear" if mode in ("linear", "bilinear") else mode,
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
    )


@_since("Resize", before=11)
def _resize_v10(b, op_type, inputs, attrs, n_out):
    x, scales = inputs[0], inputs[1]
    inputs[:] = [x, None, scales]
    attrs["coordinate_transformation_mode"] = "asymmetric"
    attrs["nearest_mode"] = "floor"


@_since("DFT", before=20)
def _dft(b, op_type, inputs, attrs, n_out):
    """Before 20 the axis was an attribute (default 1); now it is the third input."""
    axis = attrs.pop("axis", 1)
    while len(inputs) < 2:
        inputs.append(None)
    inputs.append(b.const(axis))


@_since("Scatter", before=10**6)
def _scatter(b, op_type, inputs, attrs, n_out):
    return b.op("ScatterElements", list(inputs), attrs)


@_since("Scan", before=9)
def _scan_batched(b, op_type, inputs, attrs, n_out):
    """Opset 8's Scan as a Loop over the batch that runs opset 9's Scan on each element.

    Before 9 every state and scan input had a leading batch axis, the scan axis was axis 1, the
    first input was the optional ``sequence_lens`` (one length per batch element) and
    ``directions`` was named so. The body saw one batch element, as opset 9's body does. So:

        Scan-8(lens?, s..., x...)  =  Loop(M = batch) over b:
            Scan-9(s[b]..., x[b][:lens[b]]...) -> final states, scan outputs
            scan outputs padded with zeros from lens[b] to the full length (as onnxruntime does)

    The Loop's scan outputs stack the batch back along axis 0.
    """
    lens, rest = inputs[0], list(inputs[1:])
    m, body = attrs.pop("num_scan_inputs"), attrs.pop("body")
    directions = attrs.pop("directions", None) or [0] * m
    n_state = len(rest) - m
    if not isinstance(body, Block) or m < 1 or n_state < 0 or len(body.outputs) != n_out:
        raise ValueError(f"{len(rest)} inputs, {n_out} outputs and num_scan_inputs {m} do not fit its body")
    batch = b.op("Gather", [b.op("Shape", [rest[0]])[0], b.const(0)], {"axis": 0})[0]
    index = b.value("batch_index", TensorType(DataType.INT64, ()))
    cond = b.value("cond", TensorType(DataType.BOOL, ()))
    per_item = Block(name=f"{b.source}_per_batch_item", inputs=[index, cond])
    inner = b.nested(per_item)
    picked = [inner.op("Gather", [v, index], {"axis": 0})[0] for v in rest]
    if lens is not None:
        length = inner.op("Unsqueeze", [inner.op("Gather", [lens, index], {"axis": 0})[0], inner.const([0])])[0]
        picked[n_state:] = [
            inner.op("Slice", [x, inner.const([0]), length, inner.const([0])])[0] for x in picked[n_state:]
        ]
    attrs9 = {"body": body, "num_scan_inputs": m, "scan_input_directions": list(directions)}
    results = list(inner.op("Scan", picked, attrs9, num_outputs=n_out))
    if lens is not None:
        steps = inner.op("Shape", [rest[n_state]], {"start": 1, "end": 2})[0]
        pads = inner.op("Concat", [inner.const([0]), inner.op("Sub", [steps, length])[0]], {"axis": 0})[0]
        results[n_state:] = [inner.op("Pad", [y, pads, None, inner.const([0])])[0] for y in results[n_state:]]
    per_item.outputs = [inner.op("Identity", [cond])[0], *results]
    return b.op("Loop", [batch, None], {"body": per_item}, num_outputs=n_out)


@_since("Gemm", "Add", "Sub", "Mul", "Div", "Sum", "Pow", "PRelu", before=7)
def _legacy_broadcast(b, op_type, inputs, attrs, n_out):
    attrs.pop("consumed_inputs", None)
    attrs.pop("broadcast", None)
    axis = attrs.pop("axis", None)
    if op_type == "PRelu" and axis is None:
        axis = 1  # before 7 a 1-D slope was per channel
    if axis is not None and op_type != "Gemm" and len(inputs) == 2 and None not in inputs:
        a_rank = inputs[0].type.rank if inputs[0].type is not None else None
        rhs = inputs[1]
        r_rank = rhs.type.rank if rhs.type is not None else None
        if a_rank is not None and r_rank is not None and r_rank > 0:
            axis = axis + a_rank if axis < 0 else axis
            if not 0 <= axis <= a_rank - r_rank:
                raise ValueError(f"axis {axis} does not place a rank-{r_rank} operand in a rank-{a_rank} one")
            if axis + r_rank < a_rank:
                trailing = list(range(r_rank, a_rank - axis))
                inputs[1] = b.op("Unsqueeze", [rhs, b.const(trailing)])[0]


_LEGACY_ATTRS = ("consumed_inputs",)


def upgrade(
    builder, domain: str, op_type: str, version: int, inputs: list, attrs: dict, n_out: int, where: str = ""
):
    """Rewrite one node imported under opset ``version``; see the module docstring.

    A node that lacks what its old form requires (an attribute, an input) or holds a value of
    the wrong kind there is a ModelFormatError naming ``where``, the op and the version.
    """
    for legacy in _LEGACY_ATTRS:
        attrs.pop(legacy, None)
    if domain != "":
        return None
    for before, fn in _UPGRADES.get(op_type, ()):
        if version < before:
            try:
                out = fn(builder, op_type, inputs, attrs, n_out)
            except KeyError as e:
                raise _malformed(where, op_type, version, f"it has no attribute {e}") from None
            except (ShapeError, DTypeError):  # inference's own error names what does not fit
                raise
            except (IndexError, TypeError, ValueError) as e:
                raise _malformed(where, op_type, version, str(e)) from None
            if out is not None:
                return out
    return None


def _malformed(where: str, op_type: str, version: int, why: str) -> ModelFormatError:
    return ModelFormatError(f"{where}: not a valid {op_type} of opset {version}: {why}")
