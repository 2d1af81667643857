"""The prepared call of a 2-D ConvInteger (8-bit x and w, int32 sums) of static shapes.

The kernel (conv.py ``conv_integer``) converts x and w and their zero points each run and picks
float32 only where K · 255 · 255-style worst cases stay below 2^24 (``linalg.exact_float``), so
dynamically quantized nets (ddddocr's 64 → 256 3 x 3 convs, K = 576) run in float64. This call:

- makes w − w_zero_point once, in float32, where w and its zero point are constants (read-only
  arrays), and bounds every sum by the largest per-channel L1 norm of it: a partial sum of any
  of an output's products, in any order, is at most max|x − x_zero_point| · Σ|w − w_zero_point|
  over that channel's taps ≤ 255 · max L1 norm. Below 2^24 every product and partial sum is an
  integer float32 holds exactly, so a float32 convolution by its recipe (conv_recipe.py: BLAS
  products, column copies, compiled depthwise loops, all sums of products) gives the exact
  integers; otherwise float64 (exact for any 8-bit conv below 2^37 taps).
- subtracts x's zero point into the float buffer in one pass (padding then reads 0: the zero
  point, as ConvInteger pads), runs the recipe into a float buffer, and converts it into the
  int32 output.

The results are exact integers, as the kernel's, so its bits. Weights the graph computes
(writable arrays) take the kernel into the output.
"""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from .buffers import _arena_buffers, _KeptCalls
from .conv import conv_integer
from .conv_recipe import _recipe_for

_EIGHT_BITS = (np.dtype(np.int8), np.dtype(np.uint8))
_INT32 = np.dtype(np.int32)
_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


@prepared("ConvInteger")
def _conv_integer_prepared(attrs, inputs, output):
    if output is None or len(inputs) < 2 or any(spec is None for spec in inputs):
        return None
    (x_type, x_shape), (w_type, w_shape) = inputs[:2]
    if x_type not in _EIGHT_BITS or w_type not in _EIGHT_BITS or output[0] != _INT32:
        return None
    if len(x_shape) != 4 or len(w_shape) != 4:
        return None
    if len(inputs) > 2 and (inputs[2][0] != x_type or tuple(inputs[2][1]) not in ((), (1,))):
        return None
    if len(inputs) > 3 and (inputs[3][0] != w_type or len(inputs[3][1]) > 1):
        return None
    recipes = {dt: _recipe_for("ConvInteger", attrs, x_shape, w_shape, dt) for dt in (np.float32, np.float64)}
    if recipes[np.float32] is None or recipes[np.float32].out_shape != tuple(output[1]):
        return None
    return _ConvIntegerCall(recipes, {k: attrs[k] for k in _ATTRS})


def centered_weights(w: np.ndarray, w_zero_point) -> tuple[np.ndarray, float]:
    """w − its zero point (scalar or one per output channel) in float32, exact, and the largest
    L1 norm of an output channel's weights."""
    wc = w.astype(np.float32)
    if w_zero_point is not None:
        zero = np.asarray(w_zero_point, np.float32)
        wc -= (
            zero.reshape((-1,) + (1,) * (w.ndim - 1))
            if zero.ndim == 1 and zero.size > 1
            else zero.reshape(())
        )
    norm = float(np.abs(wc).reshape(wc.shape[0], -1).sum(axis=1, dtype=np.float64).max(initial=0))
    return wc, norm


class _ConvIntegerCall(_KeptCalls):
    """ConvInteger into its int32 arena view by a float conv recipe (module docstring)."""

    __slots__ = ("attrs", "last", "recipes", "weights")

    def __init__(self, recipes: dict, attrs: dict):
        self.recipes, self.attrs = recipes, attrs
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)
        self.weights = None  # (w, w_zero_point, centered weights in the type they run in)

    def _calls(self, out, args) -> tuple:
        x, w, x_zero, w_zero = (*args, None, None)[:4]
        recipe = self.recipes[np.float32]
        if x.shape != recipe.x_shape or w.shape != recipe.w_shape or out.shape != recipe.out_shape:
            raise TypeError("not the declared shapes")
        if x.dtype not in _EIGHT_BITS or w.dtype not in _EIGHT_BITS or out.dtype != _INT32:
            raise TypeError("not the declared types")
        if w.flags.writeable or (w_zero is not None and w_zero.flags.writeable):
            return (functools.partial(_kernel_into, out, x, w, x_zero, w_zero, self.attrs),)
        kept = self.weights
        if kept is None or kept[0] is not w or kept[1] is not w_zero:
            wc, norm = centered_weights(w, w_zero)
            if 255.0 * norm >= 2**24:  # float32 sums could round: float64, exact
                wc = wc.astype(np.float64)
            kept = self.weights = (w, w_zero, wc)
        wc = kept[2]
        dtype = wc.dtype.type
        recipe = self.recipes[dtype]
        buffers = _arena_buffers(out)
        xs = buffers.get(("conv integer input",), recipe.x_shape, dtype)
        sums = buffers.get(("conv integer sums",), recipe.out_shape, dtype)
        if x_zero is None:
            calls = [functools.partial(np.copyto, xs, x, casting="safe")]
        else:
            calls = [functools.partial(np.subtract, x, x_zero.reshape(()), out=xs, dtype=dtype)]
        calls += recipe.calls(sums, xs, wc, None, buffers)
        calls.append(functools.partial(np.copyto, out, sums, casting="unsafe"))
        return tuple(calls)


def _kernel_into(out, x, w, x_zero, w_zero, attrs) -> None:
    np.copyto(out, conv_integer(None, x, w, x_zero, w_zero, **attrs))
