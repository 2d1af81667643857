"""ConvTranspose as a prepared call where its windows do not overlap: one image, one group, 2-D,
strides equal to the kernel, no dilation, pads, output padding or output shape (the 2 x 2,
stride 2 upsampling of U-Net and YOLO-style necks).

The kernel (runtime/kernels/conv.py ``conv_transpose``) copies the image transposed, takes the
product (pixels, C) @ (C, M x kernel), copies it transposed again, adds it into a zeroed buffer
one tap at a time, adds the bias into a new array and copies that out: five passes over the
result and three allocations (captcha-slider's 128 x 80 x 80 -> 160 x 160: 106 ms a run). Here
the same product reads the image as its transposed view (OpenBLAS gives a transposed operand's
product the bits of its contiguous copy), and one add of zero spreads each pixel's taps to their
places in the output (spread_loops.py, or numpy's add of a transposing view where numba is
not): without overlap each output is its one product plus zero, as in the
kernel's zeroed buffer, so the result is the kernel's bit for bit; the bias is added in place.
"""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from ._util import compiled_loops
from .buffers import _arena_buffers, _KeptCalls


@prepared("ConvTranspose")
def _conv_transpose_prepared(attrs, inputs, output):
    """A _ConvTransposeCall where the windows do not overlap (module docstring); None otherwise."""
    if len(inputs) not in (2, 3) or any(spec is None for spec in inputs) or output is None:
        return None
    (dtype, x_shape), (w_dtype, w_shape) = inputs[:2]
    if dtype not in (np.float32, np.float64) or w_dtype != dtype or output[0] != dtype:
        return None
    if len(x_shape) != 4 or len(w_shape) != 4 or x_shape[0] != 1 or w_shape[0] != x_shape[1]:
        return None
    kernel = tuple(w_shape[2:])
    if attrs.get("group", 1) != 1 or tuple(attrs.get("kernel_shape") or kernel) != kernel:
        return None
    if attrs.get("auto_pad", "NOTSET") != "NOTSET" or attrs.get("output_shape"):
        return None
    if tuple(attrs.get("strides") or (1, 1)) != kernel or tuple(attrs.get("dilations") or (1, 1)) != (1, 1):
        return None
    if any(attrs.get("pads") or [0]) or any(attrs.get("output_padding") or [0]):
        return None
    m = w_shape[1]
    out_shape = (1, m, x_shape[2] * kernel[0], x_shape[3] * kernel[1])
    if tuple(output[1]) != out_shape or (len(inputs) == 3 and tuple(inputs[2]) != (dtype, (m,))):
        return None
    return _ConvTransposeCall(tuple(x_shape), tuple(w_shape), dtype)


class _ConvTransposeCall(_KeptCalls):
    """The product of the image's pixels with the weights into a scratch (pixels, M x kernel),
    its taps spread into the output by one add of zero, then the bias added in place."""

    __slots__ = ("dtype", "last", "w_shape", "x_shape")

    def __init__(self, x_shape: tuple, w_shape: tuple, dtype):
        self.x_shape, self.w_shape, self.dtype = x_shape, w_shape, np.dtype(dtype)
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def _calls(self, out, args) -> tuple:
        x, w, b = args if len(args) == 3 else (*args, None)
        _, c, h, wd = self.x_shape
        m, kh, kw = self.w_shape[1:]
        if x.shape != self.x_shape or w.shape != self.w_shape or out.shape != (1, m, h * kh, wd * kw):
            raise TypeError("not the declared shapes")
        if any(a is not None and a.dtype != self.dtype for a in (x, w, b, out)):
            raise TypeError("not the declared types")
        if b is not None and b.shape != (m,):
            raise TypeError("not the declared bias shape")
        buffers = _arena_buffers(out)
        calls = []
        if np.may_share_memory(out, x):  # the output is written while the product reads x
            copy = buffers.get(("input",), self.x_shape, self.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        products = buffers.get(("transposed products",), (h * wd, m * kh * kw), self.dtype)
        weights = w.reshape(c, m * kh * kw)
        calls.append(functools.partial(np.matmul, x.reshape(c, h * wd).T, weights, products))
        loops = compiled_loops()
        if loops is not None:
            calls.append(functools.partial(loops.spread_taps, products, out.reshape(out.shape[1:]), kh, kw))
        else:  # numpy's add of a transposing view: inner loops of one window's width
            taps = products.reshape(h, wd, m, kh, kw).transpose(2, 0, 3, 1, 4)
            zero = np.zeros((), self.dtype)
            calls.append(functools.partial(np.add, taps, zero, out.reshape(m, h, kh, wd, kw)))
        if b is not None:
            calls.append(functools.partial(np.add, out, b.reshape(1, m, 1, 1), out))
        return tuple(calls)
