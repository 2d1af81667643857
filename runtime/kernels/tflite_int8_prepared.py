"""Prepared calls of TFLite's int8 Conv, FullyConnected and Lookup (domain ``offload.tflite``).

The kernels in tflite_int8.py convert their operands, allocate the accumulator and requantize
with a dozen numpy calls that each allocate; a streaming int8 model (tensors of 32-320 values)
spends its time there, not in arithmetic. These calls do the same arithmetic into buffers made
once per arena set: the input minus its zero point in float64, the exact accumulator by the
float64 convolution recipe (conv_recipe.py) or one BLAS product, then XNNPACK's fp32
requantization (``requantize_fp32``) in float32 written as int8 into the output's view.

Bit for bit the kernels' results: every accumulator entry is an integer below 2^53 (int8
products, int32 biases), so float64 sums are exact in any order, the bias inside the product
(``_ConvRecipe.bias_in_product``) or after it; the requantization is the kernel's float32
operations in its order (a ufunc with ``dtype=float32`` casts its float64 input first, as
``astype`` does, and one with an int8 ``out`` casts its float32 result as ``astype`` does).
"""

from __future__ import annotations

import functools

import numpy as np

from offload.ir.tflite_ops import DOMAIN

from . import prepared
from ._util import compiled_loops
from .buffers import _arena_buffers, _KeptCalls
from .conv_recipe import _ConvRecipe, _recipe_for
from .elementwise import _CLIP
from .tflite_int8 import _channel_scale


def _requantize_calls(acc: np.ndarray, scale: np.ndarray, attrs: dict, t32: np.ndarray, out) -> list:
    """``requantize_fp32(acc, scale, y_zero_point, y_min, y_max)`` into ``out``, as calls:
    acc in float32 times the scale, rounded to even, plus the zero point, clamped, as int8. One
    compiled loop (``loops.requantize``, 2.5 us against 8-10 for the four numpy calls on 64
    values) where numba is there and every scale is finite; the numpy calls otherwise."""
    zero, lo, hi = (np.float32(attrs[k]) for k in ("y_zero_point", "y_min", "y_max"))
    loops = compiled_loops()
    if loops is not None and np.isfinite(scale).all():
        every = np.ascontiguousarray(np.broadcast_to(scale, acc.shape))
        return [functools.partial(loops.requantize, acc, every, zero, lo, hi, out)]
    return [
        functools.partial(np.multiply, acc, scale, out=t32, dtype=np.float32, casting="unsafe"),
        functools.partial(np.rint, t32, out=t32),
        functools.partial(np.add, t32, zero, out=t32),
        functools.partial(_CLIP, t32, lo, hi, out, casting="unsafe"),
    ]


def _work_buffers(buffers, role: str, x_shape: tuple, out_shape: tuple) -> tuple:
    """The float64 input and accumulator and the float32 requantization buffer of one call."""
    return (
        buffers.get((f"int8 {role} input",), x_shape, np.float64),
        buffers.get((f"int8 {role} sums",), out_shape, np.float64),
        buffers.get((f"int8 {role} scaled",), out_shape, np.float32),
    )


def _widen_calls(x: np.ndarray, zero_point, xf: np.ndarray) -> list:
    """x - zero point into the float64 buffer ``xf``, exact: one compiled loop (``loops.widen``)
    where numba is there, else numpy's copy and subtract."""
    zero = np.float64(zero_point or 0)
    loops = compiled_loops()
    if loops is not None:
        return [functools.partial(loops.widen, x, zero, xf)]
    return [functools.partial(np.copyto, xf, x), functools.partial(np.subtract, xf, zero, out=xf)]


def _as_float64(a: np.ndarray, calls: list) -> np.ndarray:
    """int8 weights or int32 biases as float64: converted once where they are constants
    (read-only), again by the first of ``calls`` at each run where the graph computes them."""
    copy = a.astype(np.float64)
    if a.flags.writeable:
        calls.append(functools.partial(np.copyto, copy, a, casting="safe"))
    return copy


# Products up to this many multiply-adds run as one ``loops.int8_product`` call: 0.9-2.9 us
# against 6.7-8.7 for the four calls (FullyConnected 1 x 64, 32 x 40, 64 x 64); at 256 x 256
# (65,536) the BLAS product's calls are as fast, and faster beyond.
PRODUCT_LOOP_MACS = 1 << 14


def _product_call(x2: np.ndarray, w2: np.ndarray, b, scale: np.ndarray, attrs: dict, out2: np.ndarray):
    """One ``loops.int8_product`` call for x2 (N, K) by w2 (M, K) into out2 (N, M), views of the
    op's arrays, where the compiled loops are there, the product is small (PRODUCT_LOOP_MACS),
    every scale is finite (``_requantize_calls``' condition) and out does not share x's memory
    (it may where N is 1: the loop reads that row of x before it writes); None otherwise. It reads
    w and b as they are at each call (int8 and int32)."""
    loops = compiled_loops()
    n, k = x2.shape
    m = w2.shape[0]
    # (PRODUCT_LOOP_MACS keeps K within the 65,536 terms that int8_product sums in int32)
    if loops is None or n * m * k > PRODUCT_LOOP_MACS or (n > 1 and np.may_share_memory(out2, x2)):
        return None
    if not np.isfinite(scale).all():
        return None
    every = np.ascontiguousarray(np.broadcast_to(scale.reshape(-1), (m,)))
    params = np.array(
        [attrs["x_zero_point"] or 0, attrs["y_zero_point"], attrs["y_min"], attrs["y_max"]], np.float64
    )
    bias = np.empty(0, np.int32) if b is None else b
    return functools.partial(loops.int8_product, x2, w2, bias, every, params, out2)


def _int8_operands(specs: list, output) -> bool:
    """Whether the specs are x int8, w int8 (and b int32) with an int8 output."""
    if output is None or output[0] != np.int8 or len(specs) not in (2, 3) or any(s is None for s in specs):
        return False
    return specs[0][0] == np.int8 and specs[1][0] == np.int8 and (len(specs) == 2 or specs[2][0] == np.int32)


class _Int8ConvCall(_KeptCalls):
    """The prepared call of a 2-D ``offload.tflite::Conv`` of static shapes (depthwise ones too):
    x - zero point into a float64 buffer, the float64 recipe's calls into the accumulator (the
    bias in float64 given to the recipe), then the requantization into the int8 output."""

    __slots__ = ("attrs", "last", "recipe", "scale")

    def __init__(self, recipe: _ConvRecipe, scale: np.ndarray, attrs: dict):
        self.recipe, self.scale, self.attrs = recipe, scale, attrs
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def _calls(self, out, args) -> tuple:
        recipe = self.recipe
        x, w, b = args if len(args) == 3 else (*args, None)
        if x.shape != recipe.x_shape or w.shape != recipe.w_shape or out.shape != recipe.out_shape:
            raise TypeError("not the declared shapes")
        if x.dtype != np.int8 or w.dtype != np.int8 or out.dtype != np.int8:
            raise TypeError("not the declared types")
        if b is not None and (b.dtype != np.int32 or b.shape != (recipe.w_shape[0],)):
            raise TypeError("not the declared bias")
        g = recipe.g
        whole = x.shape[2:] == g.kernel and g.dilations == (1, 1) and not any(g.begin) and not any(g.end)
        if recipe.group == 1 and whole:  # one window, the whole input: the conv is a product
            n, m = x.shape[0], w.shape[0]
            one = _product_call(
                x.reshape(n, -1), w.reshape(m, -1), b, self.scale, self.attrs, out.reshape(n, m)
            )
            if one is not None:
                return (one,)
        calls: list = []
        wf = _as_float64(w, calls)
        bf = None if b is None else _as_float64(b, calls)
        one = self._depthwise_call(out, x, wf, bf)
        if one is not None:
            return (*calls, one)
        buffers = _arena_buffers(out)
        xf, acc, t32 = _work_buffers(buffers, "conv", x.shape, out.shape)
        calls += _widen_calls(x, self.attrs["x_zero_point"], xf)
        calls += recipe.calls(acc, xf, wf, bf, buffers)
        calls += _requantize_calls(acc, self.scale, self.attrs, t32, out)
        return tuple(calls)

    def _depthwise_call(self, out, x, wf, bf):
        """One ``loops.int8_depthwise`` call where the recipe is depthwise on the compiled path
        (``direct``), every scale is finite (``_requantize_calls``' condition) and out does not
        share x's memory; None otherwise. 1.9 us against 3.9-5.0 for the three calls on 32-64
        channels of 3-9 taps (one output pixel), 6.9 against 10.7 on 64 of 17."""
        recipe, loops = self.recipe, compiled_loops()
        if recipe.path != "direct" or loops is None or np.may_share_memory(out, x):
            return None
        if not np.isfinite(self.scale).all():
            return None
        g, c = recipe.g, recipe.x_shape[1]
        scale = np.ascontiguousarray(np.broadcast_to(self.scale.reshape(-1), (c,)))
        attrs = self.attrs
        params = np.array(
            [attrs["x_zero_point"] or 0, attrs["y_zero_point"], attrs["y_min"], attrs["y_max"]], np.float64
        )
        geom = np.array([*g.strides, *g.begin, *g.dilations], np.int64)
        bias = np.empty(0) if bf is None else bf
        return functools.partial(
            loops.int8_depthwise, x, wf.reshape((c,) + g.kernel), bias, scale, params, geom, out
        )


@prepared("Conv", domain=DOMAIN)
def _int8_conv_prepared(attrs, inputs, output):
    """An _Int8ConvCall for a 2-D int8 Conv of static shapes; None otherwise (the kernel runs it)."""
    if not _int8_operands(inputs, output):
        return None
    x_shape, w_shape = tuple(inputs[0][1]), tuple(inputs[1][1])
    if len(x_shape) != 4 or len(w_shape) != 4:
        return None
    recipe = _recipe_for("offload.tflite::Conv", attrs, x_shape, w_shape, np.float64)
    if recipe is None:
        return None
    with np.errstate(all="ignore"):  # a ratio past float32 is inf, as the kernel's
        scale = _channel_scale(attrs["x_scale"], attrs["w_scales"], attrs["y_scale"]).reshape((-1, 1, 1))
    if scale.shape[0] not in (1, recipe.out_shape[1]):
        return None
    if recipe.out_shape != tuple(output[1]) or (len(inputs) == 3 and tuple(inputs[2][1]) != (w_shape[0],)):
        return None
    return _Int8ConvCall(recipe, scale, attrs)


class _Int8FullyConnectedCall(_KeptCalls):
    """The prepared call of ``offload.tflite::FullyConnected`` of static shapes: x - zero point
    into a float64 buffer, one product by the float64 weights' transpose into the accumulator,
    plus the float64 bias, then the requantization into the int8 output."""

    __slots__ = ("attrs", "last", "scale", "shapes")

    def __init__(self, shapes: tuple, scale: np.ndarray, attrs: dict):
        self.shapes, self.scale, self.attrs = shapes, scale, attrs
        self.last = None

    def _calls(self, out, args) -> tuple:
        x, w, b = args if len(args) == 3 else (*args, None)
        if (x.shape, w.shape, out.shape) != self.shapes or (b is not None and b.shape != (w.shape[0],)):
            raise TypeError("not the declared shapes")
        if x.dtype != np.int8 or w.dtype != np.int8 or out.dtype != np.int8:
            raise TypeError("not the declared types")
        if b is not None and b.dtype != np.int32:
            raise TypeError("not the declared types")
        k, m = x.shape[-1], w.shape[0]
        one = _product_call(x.reshape(-1, k), w, b, self.scale, self.attrs, out.reshape(-1, m))
        if one is not None:
            return (one,)
        buffers = _arena_buffers(out)
        calls: list = []
        wt = _as_float64(w, calls).T
        bf = None if b is None else _as_float64(b, calls)
        xf, acc, t32 = _work_buffers(buffers, "fc", x.shape, out.shape)
        calls += _widen_calls(x, self.attrs["x_zero_point"], xf)
        calls.append(functools.partial(np.matmul, xf, wt, out=acc))
        if bf is not None:
            calls.append(functools.partial(np.add, acc, bf, out=acc))
        calls += _requantize_calls(acc, self.scale, self.attrs, t32, out)
        return tuple(calls)


@prepared("FullyConnected", domain=DOMAIN)
def _int8_fully_connected_prepared(attrs, inputs, output):
    """An _Int8FullyConnectedCall for x (..., K) by w (M, K) of static shapes; None otherwise."""
    if not _int8_operands(inputs, output):
        return None
    x_shape, w_shape, y_shape = tuple(inputs[0][1]), tuple(inputs[1][1]), tuple(output[1])
    if (
        len(x_shape) < 1
        or len(w_shape) != 2
        or x_shape[-1] != w_shape[1]
        or y_shape != (*x_shape[:-1], w_shape[0])
    ):
        return None
    if len(inputs) == 3 and tuple(inputs[2][1]) != (w_shape[0],):
        return None
    with np.errstate(all="ignore"):
        scale = _channel_scale(attrs["x_scale"], attrs["w_scales"], attrs["y_scale"])
    if scale.ndim != 1 or scale.shape[0] not in (1, w_shape[0]):
        return None
    return _Int8FullyConnectedCall((x_shape, w_shape, y_shape), scale, attrs)


class _LookupCall(_KeptCalls):
    """The prepared call of ``offload.tflite::Lookup`` on int8: the 256-entry table reordered
    once so that the input's bytes read as uint8 index it (entry u is the kernel's ``table[x +
    128]`` for the int8 x with those bits), one ``take`` into the output."""

    __slots__ = ("last",)

    def __init__(self):
        self.last = None

    def _calls(self, out, args) -> tuple:
        x, table = args
        if x.dtype != np.int8 or table.shape != (256,) or table.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared types")
        order = np.arange(256).astype(np.uint8).view(np.int8).astype(np.intp) + 128
        by_bits = table[order]
        calls = []
        if table.flags.writeable:  # a table the graph computes: reordered at each run
            calls.append(functools.partial(np.take, table, order, out=by_bits, mode="clip"))
        calls.append(functools.partial(np.take, by_bits, x.view(np.uint8), out=out, mode="clip"))
        return tuple(calls)


@prepared("Lookup", domain=DOMAIN)
def _lookup_prepared(attrs, inputs, output):
    """A _LookupCall for an int8 input and a table of 256 entries; None otherwise."""
    if len(inputs) != 2 or any(s is None for s in inputs) or output is None:
        return None
    (x_dtype, x_shape), (t_dtype, t_shape) = inputs
    if (
        x_dtype != np.int8
        or tuple(t_shape) != (256,)
        or t_dtype != output[0]
        or tuple(x_shape) != tuple(output[1])
    ):
        return None
    return _LookupCall()
