"""An int8 TFLite Conv that reads its input channels-last: the prepared call of the importer's
Transpose (NHWC → NCHW) and the ``offload.tflite::Conv`` that alone reads its result, made one
(runtime/int8_fusions.py pairs the steps).

Two forms, those ``_Int8ConvCall`` takes one compiled call for on NCHW input:
- a depthwise conv: ``loops.int8_depthwise_nhwc`` on the Transpose's input, its weights
  reordered once to (KH, KW, C) in int32;
- a conv whose one window is its whole input (a streaming model's first layer: 5 frames of 40
  features): ``loops.int8_product`` of the flattened NHWC input by the weights reordered once
  to (M, KH · KW · C), the order of the input's values.
Both sum the same integer products as the NCHW calls, exactly, so their int8 results are those
calls' bits (tests/runtime/test_int8_nhwc.py).
"""

from __future__ import annotations

import functools

import numpy as np

from ._util import compiled_loops
from .buffers import _arena_buffers, _KeptCalls
from .tflite_int8_prepared import PRODUCT_LOOP_MACS, _Int8ConvCall, _product_call

# int8_depthwise_nhwc sums in int32: |(x - zero) · w| <= 255 · 128, so up to 2^16 taps.
MAX_DEPTHWISE_TAPS = 1 << 16


class _Int8NHWCConvCall(_KeptCalls):
    """The prepared call of an int8 Conv (``conv``, an _Int8ConvCall) on the NHWC tensor its
    Transpose reads, of the conv's constant weights ``w`` and bias ``b`` (None where it has
    none): ``kind`` "depthwise" or "product" (the module docstring). Where the output shares
    memory with the input (an arena place the Transpose's input left free), the input is copied
    to a buffer first, unless the loop reads all of it before it writes."""

    __slots__ = ("bias", "conv", "kind", "last", "weights", "x_shape")

    def __init__(self, conv: _Int8ConvCall, kind: str, x_shape: tuple, weights: np.ndarray, bias):
        self.conv, self.kind, self.x_shape, self.weights, self.bias = conv, kind, x_shape, weights, bias
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def _calls(self, out, args) -> tuple:
        x = args[0]
        recipe = self.conv.recipe
        if x.shape != self.x_shape or x.dtype != np.int8 or not x.flags.c_contiguous:
            raise TypeError("not the declared input")
        if out.shape != recipe.out_shape or out.dtype != np.int8:
            raise TypeError("not the declared output")
        calls: list = []
        # The depthwise loop of one output pixel (a streaming layer's), and the product of one
        # row, read all of x before they write: out may then lie over x.
        reads_first = out.size == out.shape[1] if self.kind == "depthwise" else out.shape[0] == 1
        if np.may_share_memory(out, x) and not reads_first:
            copy = _arena_buffers(out).get(("int8 nhwc input",), x.shape, np.int8)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        if self.kind == "product":
            n, m = x.shape[0], self.weights.shape[0]
            b = None if len(args) < 3 else args[2]
            one = _product_call(
                x.reshape(n, -1), self.weights, b, self.conv.scale, self.conv.attrs, out.reshape(n, m)
            )
            if one is None:
                raise TypeError("not a small product")
            return (*calls, one)
        c, attrs, g = x.shape[3], self.conv.attrs, recipe.g
        scale = np.ascontiguousarray(np.broadcast_to(self.conv.scale.reshape(-1), (c,)))
        params = np.array(
            [attrs["x_zero_point"] or 0, attrs["y_zero_point"], attrs["y_min"], attrs["y_max"]], np.float64
        )
        geom = np.array([*g.strides, *g.begin, *g.dilations], np.int64)
        calls.append(
            functools.partial(
                compiled_loops().int8_depthwise_nhwc, x, self.weights, self.bias, scale, params, geom, out
            )
        )
        return tuple(calls)


def nhwc_conv_call(conv, x_shape: tuple, w: np.ndarray, b) -> _Int8NHWCConvCall | None:
    """The channels-last form of ``conv`` (a prepared call) for an NHWC input of ``x_shape`` and
    the constant weights ``w`` (int8, M x C/group x KH x KW) and bias ``b`` (int32, or None),
    where it is an _Int8ConvCall that takes one compiled call on NCHW input (the module
    docstring's two forms); None otherwise."""
    loops = compiled_loops()
    if type(conv) is not _Int8ConvCall or loops is None or not np.isfinite(conv.scale).all():
        return None
    recipe, g = conv.recipe, conv.recipe.g
    n, h, wd, c = x_shape
    if recipe.x_shape != (n, c, h, wd) or w.shape != recipe.w_shape or w.dtype != np.int8:
        return None
    if b is not None and (b.dtype != np.int32 or b.shape != (w.shape[0],)):
        return None
    m, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    whole = (h, wd) == g.kernel and g.dilations == (1, 1) and not any(g.begin) and not any(g.end)
    if recipe.group == 1 and whole:
        if n * m * h * wd * c > PRODUCT_LOOP_MACS:
            return None
        weights = np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(m, -1))
        return _Int8NHWCConvCall(conv, "product", x_shape, weights, None)
    if recipe.path != "direct" or recipe.group != c or m != c or kh * kw > MAX_DEPTHWISE_TAPS:
        return None
    weights = np.ascontiguousarray(w.reshape(c, kh, kw).transpose(1, 2, 0).astype(np.int32))
    bias = np.zeros(c, np.int64) if b is None else b.astype(np.int64)
    return _Int8NHWCConvCall(conv, "depthwise", x_shape, weights, bias)
