"""TFLite's Fourier transform and complex-number operators as IR ops: RFFT2D, COMPLEX_ABS, REAL,
IMAG, and the shape operators a converter puts around RFFT2D (RESHAPE, SQUEEZE, EXPAND_DIMS) when
they move a complex tensor.

The IR has no complex arithmetic. A complex64 tensor inside a model is held as ONNX's DFT holds
one: a float32 tensor with a trailing dimension of 2, the real part then the imaginary part.
RFFT2D (float32 [..., H, W], constant fft_length [h, w] → complex64 [..., h, w/2 + 1]) reads
the first h rows and w columns of each [H, W] slice, zeros where the slice is smaller, and
transforms along each row, then along each column: a one-sided DFT of length w on the last axis,
then a full DFT of length h on the second-last (none when h = 1 and the input has one row, the
form a converter gives a 1-D rfft). The DFT's length crops or zero-pads each axis exactly as
LiteRT does; rows past h are sliced off first, so that no row transform is spent on them.

LiteRT computes in double and rounds the result to float32; the IR's DFT computes in float32,
so a bin differs from LiteRT's by a few float32 rounding steps of the slice's largest magnitude
(the order of summation differs). LiteRT accepts powers of two only for fft_length; any positive
length is computed here (the DFT is defined for every length).

Any operator that reads or writes a complex tensor goes through ``complex_rule``: one of the
rules here, or an ``UnsupportedOpError`` naming it (an ADD of two complex tensors, a CAST to
complex64 …), never a rule written for real tensors applied to pairs. A model's own inputs and
outputs cannot be complex (``refuse_complex_tensor``): the model must end in COMPLEX_ABS, REAL or
IMAG, as audio front ends do.
"""

from __future__ import annotations

import numpy as np

from offload.errors import UnsupportedOpError
from offload.ir import DataType, Value
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import Node, Rule, rule
from .tflite_tensor_ops import new_shape, reshape_attrs

COMPLEX_TYPES = {TflType.COMPLEX64: np.float32, TflType.COMPLEX128: np.float64}
COMPLEX_RULES: dict[str, Rule] = {}  # operator name → its rule when a complex tensor is involved


def _complex(*names: str, version: int = 1, inputs: int = 1, real_rule: bool = False):
    """A rule for operators on complex tensors, in ``COMPLEX_RULES``; also in ``RULES`` (and
    docs/tflite.md's table) unless the operator has a rule of its own for real tensors."""

    def register(fn: Rule) -> Rule:
        if not real_rule:
            rule(*names, version=version, inputs=inputs)(fn)
        for name in names:
            COMPLEX_RULES[name] = fn
        return fn

    return register


def complex_rule(node: Node) -> Rule | None:
    """The rule for ``node`` when one of its tensors is complex, None when none is."""
    tensors = [t for t in [*node.tensors, *node.outputs] if t is not None]
    if not any(t.get("type") in COMPLEX_TYPES for t in tensors):
        return None
    fn = COMPLEX_RULES.get(node.name)
    if fn is None:
        raise node.unsupported(
            "complex tensors are supported only by RFFT2D, COMPLEX_ABS, REAL, IMAG, RESHAPE, "
            "SQUEEZE and EXPAND_DIMS (docs/tflite.md, section Complex tensors)"
        )
    return fn


def refuse_complex_tensor(origin: str, t, path: str, what: str) -> None:
    """A model input or output ``t`` that is complex: an ``UnsupportedOpError``."""
    code = t.get("type")
    if code in COMPLEX_TYPES:
        kind = "complex64" if code == TflType.COMPLEX64 else "complex128"
        raise UnsupportedOpError(
            f"{origin}: {path}: the model {what} '{t.get('name')}' is {kind}; offload holds complex "
            "tensors as (real, imaginary) float pairs inside a model and takes or returns none: "
            "end the model in COMPLEX_ABS, REAL or IMAG"
        )


def _pairs(node: Node, i: int) -> Value:
    """Complex input ``i`` as (real, imaginary) pairs on a trailing axis: a complex constant is
    split here, any other complex value already is pairs (a rule of this module made it)."""
    v, code = node.inputs[i], node.tensors[i].get("type")
    if code not in COMPLEX_TYPES:
        raise node.fail(f"input {i} ('{v.name}') is not a complex tensor")
    if v.const_value is not None and np.iscomplexobj(v.const_value):
        real = COMPLEX_TYPES[code]
        c = v.const_value
        return node.imp.const(np.ascontiguousarray(np.stack([c.real, c.imag], axis=-1).astype(real)))
    if v.type is not None and v.type.dtype in (DataType.COMPLEX64, DataType.COMPLEX128):
        raise node.unsupported(f"input {i} ('{v.name}') is a complex tensor this importer cannot split")
    return v


def _scalar(node: Node, value: int) -> Value:
    return node.imp.const(np.asarray(value, np.int64))


def fft_lengths(node: Node) -> tuple[int, int]:
    """RFFT2D's fft_length: a constant of two positive lengths (rows, columns)."""
    lengths = node.const(1)
    if lengths.dtype.kind not in "iu" or lengths.shape != (2,):
        raise node.fail(f"fft_length {lengths.tolist()} ({lengths.dtype}) is not two integers")
    height, width = (int(n) for n in lengths)
    if height < 1 or width < 1:
        raise node.fail(f"fft_length {[height, width]} is not positive")
    return height, width


@_complex("RFFT2D", version=1, inputs=2)
def rfft2d(node: Node) -> list:
    if node.tensors[0].get("type") != TflType.FLOAT32:
        raise node.unsupported("input 0 must be float32, as LiteRT requires")
    if node.outputs[0].get("type") != TflType.COMPLEX64:
        raise node.fail("its output is not complex64")
    height, width = fft_lengths(node)
    dims = node.dims(0)
    if len(dims) < 2:
        raise node.fail(f"input 0 of shape {list(dims)} has fewer than two dimensions")
    x, rows = node.inputs[0], dims[-2]
    if isinstance(rows, int) and rows > height:  # rows past h are cropped: drop them first
        x = node.one("Slice", [x, node.ints([0]), node.ints([height]), node.ints([-2])])
        rows = height
    real = node.one("Unsqueeze", [x, node.ints([-1])])  # [..., H, W, 1]: a real signal
    attrs = {"onesided": 1}
    y = node.one("DFT", [real, _scalar(node, width), _scalar(node, -2)], attrs)  # [..., H, w/2+1, 2]
    if height == 1 and rows == 1:
        return [y]
    return node.op("DFT", [y, _scalar(node, height), _scalar(node, -3)], {"onesided": 0})


@_complex("COMPLEX_ABS", version=1)
def complex_abs(node: Node) -> list:
    return node.op("ReduceL2", [_pairs(node, 0), node.ints([-1])], {"keepdims": 0})


@_complex("REAL", "IMAG", version=1)
def real_imag(node: Node) -> list:
    part = 0 if node.name == "REAL" else 1
    return node.op("Gather", [_pairs(node, 0), _scalar(node, part)], {"axis": -1})


def _before_pairs(axes) -> list[int]:
    """Axes of a complex tensor's shape as axes of its pairs: a negative one counts one more."""
    return [int(a) - 1 if a < 0 else int(a) for a in np.asarray(axes).reshape(-1)]


@_complex("SQUEEZE", real_rule=True)
def squeeze_complex(node: Node) -> list:
    dims = node.opt("squeeze_dims") if node.options is not None else None
    if dims is None or len(dims) == 0:  # every dimension of size 1 (the pair axis has 2)
        return node.op("Squeeze", [_pairs(node, 0)])
    return node.op("Squeeze", [_pairs(node, 0), node.ints(_before_pairs(dims))])


@_complex("EXPAND_DIMS", real_rule=True)
def expand_dims_complex(node: Node) -> list:
    return node.op("Unsqueeze", [_pairs(node, 0), node.ints(_before_pairs(node.const(1)))])


@_complex("RESHAPE", real_rule=True)
def reshape_complex(node: Node) -> list:
    """The complex tensor's new shape followed by the pair axis."""
    dims = new_shape(node)
    if isinstance(dims, np.ndarray):
        shape = node.ints([*dims.tolist(), 2])
    else:
        shape = node.one("Concat", [dims, node.ints([2])], {"axis": 0})
    return node.op("Reshape", [_pairs(node, 0), shape], reshape_attrs(dims))
