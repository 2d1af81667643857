"""QuantizeLinear and DequantizeLinear, per tensor or per axis: ``kernels_cl/quantize.cl``.

What runs on the device is the ONNX forms a QDQ model holds (opsets 10 to 21, which the importer
gives the latest schema): float32 → int8 / uint8 and back, int32 → float32 (a bias); a scale and
a zero point of one element, or 1-D along ``axis``. Block quantization (``block_size`` > 0),
the float8 / int4 / 16-bit types and a ``precision`` other than float32 stay on the CPU.

Both backends build the same source, so they quantize alike where their float32 division is
IEEE's (correctly rounded): CUDA's by default (NVRTC's -prec-div=true) and PoCL's. OpenCL 1.2
lets other devices divide within 2.5 ulp, as for every Div, so there an x / scale next to a
rounding tie may land one step away from the CPU's.

A DequantizeLinear of constants (a weight or a bias stored quantized) never launches: the
launcher computes its float32 value on the host when the plan is recorded at init and hands it
to the builder, which uploads it once with the weights, so a run reads the float weight like any
other. This is done here, in the delegate's lowering, rather than by a graph pass over the
partitions, because then (1) the .pte keeps the weight in its quantized type (4× smaller), shared
with the partition's CPU fallback, which keeps its own numerics; (2) it holds whatever passes ran
before, ``passes="none"`` and weights past ``cleanup::const_elimination``'s size limit (2²²
elements) included (the default pipeline's const_elimination folds the smaller ones first, with
the CPU kernel, to the same values); (3) no pass has to know which partition a constant lands in.
The host fold computes what the kernel does: the zero point subtracted in int64, the difference
converted to float32, times the scale.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError
from offload.ir import DataType, attributes_of

from ...backend import OpCapability, Support
from ..api import Buf, Builder, ctype, options, source

_QUANTIZED = {DataType.INT8: (-128, 127), DataType.UINT8: (0, 255)}
_DEQUANTIZED = (*_QUANTIZED, DataType.INT32)
_TYPES = frozenset({DataType.FLOAT, *_DEQUANTIZED})

CAPS = {
    "QuantizeLinear": OpCapability(
        _TYPES,
        attributes={
            "block_size": (0,),
            "output_dtype": (0, *(int(t) for t in _QUANTIZED)),
            "precision": (0, int(DataType.FLOAT)),
        },
    ),
    "DequantizeLinear": OpCapability(
        _TYPES, attributes={"block_size": (0,), "output_dtype": (0, int(DataType.FLOAT))}
    ),
}


def _check(op) -> Support | None:
    x, scale = op.inputs[:2]
    zp = op.inputs[2] if len(op.inputs) > 2 else None
    quantize = op.op_type == "QuantizeLinear"
    q = op.outputs[0] if quantize else x
    real = x if quantize else op.outputs[0]
    if real.type.dtype != DataType.FLOAT or scale.type.dtype != DataType.FLOAT:
        return Support(False, f"{op.op_type} of a {real.type.dtype.short} value or scale (takes fp32)")
    allowed = _QUANTIZED if quantize else _DEQUANTIZED
    if q.type.dtype not in allowed:
        return Support(False, f"{op.op_type} of {q.type.dtype.short} (takes {', '.join(t.short for t in allowed)})")
    if zp is not None and zp.type.dtype != q.type.dtype:
        return Support(False, f"{op.op_type} whose zero point is {zp.type.dtype.short}, not {q.type.dtype.short}")
    if scale.type.rank is not None and scale.type.rank > 1:
        return Support(False, f"{op.op_type} of a rank-{scale.type.rank} scale (blocked)")
    rank = x.type.rank
    axis = int(attributes_of(op).get("axis", 1))
    if scale.type.rank == 1 and rank is not None and not -rank <= axis < rank:
        return Support(False, f"{op.op_type} axis {axis} of a rank-{rank} tensor")
    return None


CHECKS = {"QuantizeLinear": _check, "DequantizeLinear": _check}


def _layout(b: Builder, step: dict) -> tuple[int, int, int]:
    """(n, inner, C): the element count, the elements after the axis, the scale's entries."""
    x, scale = step["inputs"][:2]
    zp = step["inputs"][2] if len(step["inputs"]) > 2 else None
    shape, sshape = b.shape(x), b.shape(scale)
    n, C = math.prod(shape), math.prod(sshape)
    if len(sshape) > 1 or (zp is not None and b.shape(zp) != sshape):
        raise ModelFormatError(
            f"gpu backend: {step['type']} of {shape} with a scale {sshape} and a zero point "
            f"{None if zp is None else b.shape(zp)} (takes one element or 1-D ones of one shape)"
        )
    if C == 1:  # per tensor, or per axis along an axis of one
        return n, 1, 1
    axis = int(step["attributes"].get("axis", 1))
    if not -len(shape) <= axis < len(shape) or shape[axis % len(shape)] != C:
        raise ModelFormatError(f"gpu backend: {step['type']} of {shape} with a scale {sshape} along axis {axis}")
    return n, math.prod(shape[axis % len(shape) + 1 :]), C


def _launch(b: Builder, step: dict, kernel: str) -> None:
    inputs, (out,) = step["inputs"], step["outputs"]
    x, scale = inputs[:2]
    zp = inputs[2] if len(inputs) > 2 else None
    q = out if kernel == "quantize" else x
    n, inner, C = _layout(b, step)
    lo, hi = np.iinfo(b.dtype(q)).min, np.iinfo(b.dtype(q)).max
    opts = f"-DQ={ctype(b.dtype(q))} -DLO={lo} -DHI={hi} -DHAS_ZP={int(zp is not None)}"
    program = b.program(source("quantize.cl"), options(b, opts))
    if n == 0:
        return
    bufs = [Buf(x), Buf(scale), *([Buf(zp)] if zp is not None else []), Buf(out)]
    b.launch(program, kernel, (n,), None, [*bufs, np.int64(inner), np.int64(C), np.int64(n)])


def _quantize(b: Builder, step: dict) -> None:
    _launch(b, step, "quantize")


def dequantized(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, inner: int, C: int) -> np.ndarray:
    """What the dequantize kernel computes, on the host: entry (g / inner) % C of the scale and the
    zero point for element g, the difference exact in int64, float32 times the scale."""
    c = (np.arange(x.size) // inner) % C
    diff = x.reshape(-1).astype(np.int64)
    if zp is not None:
        diff = diff - zp.reshape(-1).astype(np.int64)[c]
    y = diff.astype(np.float32) * scale.reshape(-1).astype(np.float32)[c]
    return y.reshape(x.shape)


def _dequantize(b: Builder, step: dict) -> None:
    inputs, (out,) = step["inputs"], step["outputs"]
    known = [None if i is None else b.const(i) for i in inputs]
    if all(k is not None for i, k in zip(inputs, known) if i is not None):
        _n, inner, C = _layout(b, step)
        zp = known[2] if len(known) > 2 else None
        b.constant(out, dequantized(known[0], known[1], zp, inner, C))
        return
    _launch(b, step, "dequantize")


LAUNCH = {"QuantizeLinear": _quantize, "DequantizeLinear": _dequantize}
