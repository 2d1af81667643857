"""An activation's QuantizeLinear → DequantizeLinear pair as one prepared call (``QuantizePairCall``).

The CPU executor makes a per-tensor 8-bit QuantizeLinear and the DequantizeLinear that alone
reads its result one step (``runtime/quantize_pairs.py``); this is that step's call. It computes
what the two prepared calls (``quantization._QuantizeCall``, ``_DequantizeCall``) compute, the
same float32 operations in the same order:

    q = clip(rint(x / s) + zp, qmin, qmax)      in float32; x / s is a division, as the ONNX
                                                 spec writes it (x · (1 / s) rounds otherwise)
    y = (q - zp') · s'                           q is an integer of 8 bits, exact in float32

so y is bit for bit what the two steps give; the 8-bit q is never stored. With the compiled
loops (``quantize_loops.quantize_dequantize8``) it is one pass where x and y are C-contiguous
(y's arena place may be x's, or overlap it: the loop's blocks are read before they are
stored); otherwise (numpy paths, strided pieces) the two calls run one after the other through
a buffer of q.
"""

from __future__ import annotations

import functools

import numpy as np

from ._util import compiled_loops
from .quantization import _DequantizeCall, _QuantizeCall

_F32 = np.dtype(np.float32)
_EIGHT_BITS = (np.dtype(np.int8), np.dtype(np.uint8))


class QuantizePairCall:
    """``out = DequantizeLinear(QuantizeLinear(x, s, zp), s', zp')`` for float32 x, 0-d float32
    scales and 0-d 8-bit zero points (either may be omitted), the quantized values of
    ``qtype``. Arguments: out, then the QuantizeLinear's inputs (``q_inputs`` of them), then
    the DequantizeLinear's scale and zero point; x of any layout (``any_layout``)."""

    __slots__ = ("q_inputs", "qtype")
    any_layout = True

    def __init__(self, qtype: np.dtype, q_inputs: int):
        self.qtype, self.q_inputs = np.dtype(qtype), q_inputs

    def __call__(self, out, *args):
        self.bind(out, *args)()

    def bind(self, out, *args):
        q_args, dq_args = args[: self.q_inputs], args[self.q_inputs :]
        x, scale = q_args[0], q_args[1]
        zero = q_args[2] if len(q_args) > 2 else None
        out_scale = dq_args[0]
        out_zero = dq_args[1] if len(dq_args) > 1 else None
        for z in (zero, out_zero):
            if z is not None and (z.dtype != self.qtype or z.shape != ()):
                raise TypeError("not the declared types")
        if (
            x.dtype != _F32
            or out.dtype != _F32
            or x.shape != out.shape
            or scale.dtype != _F32
            or out_scale.dtype != _F32
            or scale.shape != ()
            or out_scale.shape != ()
        ):
            raise TypeError("not the declared types")
        loops = compiled_loops()
        if loops is not None and x.flags.c_contiguous and out.flags.c_contiguous:
            info = np.iinfo(self.qtype)
            # where out's bytes start after x's (an arena place over x's): blocks last to first
            backward = np.may_share_memory(out, x) and _address(out) > _address(x)
            no_zero = np.zeros((), self.qtype)
            return functools.partial(
                loops.quantize_dequantize8,
                x,
                scale,
                no_zero if zero is None else zero,
                _F32.type(info.min),
                _F32.type(info.max),
                out_scale,
                no_zero if out_zero is None else out_zero,
                out,
                backward,
            )
        q = np.empty(x.shape, self.qtype)  # x is read whole before out is written
        quantize = _QuantizeCall().bind(q, *q_args)
        dequantize = _DequantizeCall().bind(out, q, *dq_args)

        def run():
            quantize()
            dequantize()

        return run


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]
