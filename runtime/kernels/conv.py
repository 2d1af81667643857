"""Convolution kernels: Conv, ConvInteger, QLinearConv, ConvTranspose, Col2Im, CausalConvWithState.

Convolutions are products of the weights with the input's windows by BLAS (``_conv_product``): a
1 x 1 kernel with stride 1 and no padding takes the image itself as the [C, pixels] operand; other
kernels copy the windows into a column matrix (im2col) in a scratch buffer reused across calls.
"""

from __future__ import annotations

import functools
from math import prod
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from offload.errors import ShapeError

from . import kernel, prepared
from ._util import check_result, filled, out_for, unsupported
from .buffers import _arena_buffers, _KeptCalls, _scratch
from .conv_recipe import _conv_by_recipe, _ConvRecipe, _recipe_for
from .elementwise import _CLIP, _hard_passes, _PReluCall
from .linalg import exact_float, saturate, shifted, widened
from .windows import _channel_bias, _columns, _Geom, _geometry, _ints, _padded, _scatter_windows, _windows

# ---------------------------------------------------------------------------- convolution


def _grouped_product(cols, w, group: int, dest=None):
    """Convolution sums of windows cols (N, C, *out, *kernel) with w (M, C/group, *kernel): (N, M, *out).

    The im2col matrix is laid out (G, C/G·kernel, N·out) so that copying it reads rows of the
    input, and the product W·cols comes out in NCHW order without a transpose for N = 1.
    """
    n, c = cols.shape[:2]
    nd = (cols.ndim - 2) // 2
    out = cols.shape[2 : 2 + nd]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        raise ShapeError(f"input with {c} channels, weights of shape {w.shape} and group={group} do not fit")
    cg, mg = c // group, m // group
    a = cols.reshape((n, group, cg) + cols.shape[2:])
    out_axes = tuple(range(3, 3 + nd))
    kernel_axes = tuple(range(3 + nd, 3 + 2 * nd))
    a = a.transpose((1, 2, *kernel_axes, 0, *out_axes)).reshape(group, cg * prod(w.shape[2:]), n * prod(out))
    if dest is not None and n == 1:  # (G, M/G, out) is the planned (1, M, *out) itself
        np.matmul(w.reshape(group, mg, -1), a, out=dest.reshape(group, mg, -1))
        return dest
    y = np.matmul(w.reshape(group, mg, -1), a)  # (G, M/G, N*out)
    return y.reshape(group, mg, n, prod(out)).transpose(2, 0, 1, 3).reshape((n, m) + out)


def _conv_product(x, w, g: _Geom, group: int, dest=None):
    """Convolution sums of x (N, C, *size) with w (M, C/group, *kernel): (N, M, *out), into
    ``dest`` when given.

    Per image, one BLAS product per group, (M/G, C/G·kernel) @ (C/G·kernel, out), written
    straight into the image's rows of the result. A depthwise conv (one channel per group) keeps
    the batched form over a window view: it measured faster than a loop over the kernel offsets
    (9 multiply-adds of the whole image) and than einsum on ShuffleNet's depthwise layers."""
    n, c = x.shape[:2]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c:
        raise ShapeError(f"input with {c} channels, weights of shape {w.shape} and group={group} do not fit")
    cg, mg = c // group, m // group
    if cg == 1:
        return _grouped_product(_windows(x, g), w, group, dest)
    out = dest if dest is not None else np.empty((n, m) + g.out, np.result_type(x, w))
    if dest is not None and np.may_share_memory(dest, x):
        x = x.copy()  # the planned output may reuse the input's memory: products read it after writes
    size, pixels = prod(g.kernel) * cg, prod(g.out)
    padded = any(g.begin) or any(g.end)
    direct = size == cg and all(s == 1 for s in g.strides) and not padded  # 1 x 1: the image itself
    xp = _padded(x, g) if padded else x
    weights = w.reshape(group, mg, size)
    cols = None if direct else _scratch((c,) + g.kernel + g.out, out.dtype)
    for i in range(n):
        if direct:
            operand = x[i].reshape(group, size, pixels)
        else:
            np.copyto(cols, _columns(xp[i], g))
            operand = cols.reshape(group, size, pixels)
        np.matmul(weights, operand, out=out[i].reshape(group, mg, pixels))
    return out


class _Epilogue(NamedTuple):
    """The elementwise op that reads a Conv's result and nothing else reads, applied by the
    conv's recipe to each part of its output in place (``_ConvRecipe.calls``): the calls of the op's
    own prepared call (runtime/kernels/elementwise.py), so that the results are those of the two
    steps bit for bit, without a step of its own or a pass over the whole output from memory.
    The CPU executor pairs the two steps (runtime/fusions.py, ``_fuse_epilogues``); the graph
    keeps both ops, so the GPU backends see the graph unchanged."""

    op: str  # Relu | Clip | HardSwish | HardSigmoid | LeakyRelu | Max | Min
    alpha: float = 0.0
    beta: float = 0.0
    then: _Epilogue | None = None  # the op after this one, reading its result alone
    extras: int = 0  # how many of the extra inputs are this op's (the rest are ``then``'s)

    def calls(self, part, extras: tuple, buffers) -> list:
        """The op's calls on ``part`` of the output, its other inputs ``extras`` (Clip's 0-d
        bounds, Max's or Min's operand, all 0-d: ``scalar_extras``), then those of the ops after it."""
        mine, rest = extras[: self.extras], extras[self.extras :]
        calls = self._own(part, mine, buffers)
        return calls if self.then is None else calls + self.then.calls(part, rest, buffers)

    def followed_by(self, then: _Epilogue) -> _Epilogue:
        """This op, then ``then`` on its result."""
        last = then if self.then is None else self.then.followed_by(then)
        return self._replace(then=last)

    def _own(self, part, extras: tuple, buffers) -> list:
        if self.op == "Relu":  # a full operand of zeros, as the prepared Relu: numpy's fast loop
            zeros = buffers.get(("zeros",), part.shape, part.dtype)
            return [functools.partial(np.maximum, part, zeros, out=part)]
        if self.op == "Clip":
            lo, hi = extras
            return [functools.partial(_CLIP, part, lo, hi, part)]
        if self.op in ("Max", "Min"):  # a 0-d constant as a full operand: numpy's fast loop
            (other,) = extras
            full = filled(other, part.dtype, part.shape)
            return [functools.partial(np.maximum if self.op == "Max" else np.minimum, part, full, out=part)]
        if self.op == "LeakyRelu":  # the prepared LeakyRelu's passes, bit for bit
            return [_PReluCall().bind(part, part, np.array(self.alpha, part.dtype))]
        swish = self.op == "HardSwish"
        temp = buffers.get(("epilogue",), part.shape, part.dtype) if swish else None
        return [_hard_passes(part, part, self.alpha, self.beta, swish, temp)]


def _epilogue(op_type: str, attrs: dict, extras: list, dtype, rank: int) -> _Epilogue | None:
    """The _Epilogue of an op with inputs beyond the conv's result (of ``rank`` dimensions) of
    specs ``extras``, or None where its prepared call is not one that runs in place per part
    (Clip's bounds not 0-d). Max's or Min's operand may be any one-element tensor of at most
    ``rank`` dimensions (tf2onnx's (1, 1, 1, 1) constants): it broadcasts to the result's shape,
    so the op reads it as its one value (``scalar_extras``)."""
    if op_type == "Relu" and not extras:
        return _Epilogue("Relu")
    if op_type == "Clip" and len(extras) == 2 and all(e == (dtype, ()) for e in extras):
        return _Epilogue("Clip", extras=2)
    if op_type in ("HardSwish", "HardSigmoid") and not extras:
        return _Epilogue(op_type, attrs.get("alpha", 1 / 6), attrs.get("beta", 0.5))
    if op_type == "LeakyRelu" and not extras and np.dtype(dtype).kind == "f":
        return _Epilogue("LeakyRelu", attrs.get("alpha", 0.01))
    if op_type in ("Max", "Min") and len(extras) == 1 and _one_value(extras[0], dtype, rank):
        return _Epilogue(op_type, extras=1)
    return None


def _one_value(spec: tuple, dtype, rank: int) -> bool:
    """Whether a (dtype, shape) spec is a one-element tensor of ``dtype`` that broadcasts to any
    shape of ``rank`` dimensions without changing it."""
    value_dtype, shape = spec
    return value_dtype == dtype and len(shape) <= rank and all(d == 1 for d in shape)


def scalar_extras(extras: tuple, dtype) -> tuple:
    """An epilogue's extra inputs as 0-d views, each a one-element array of ``dtype`` (checked:
    a bound call's arrays are those its plan was made for)."""
    if any(e.dtype != dtype or e.size != 1 for e in extras):
        raise TypeError("not the declared types")
    return tuple(e.reshape(()) for e in extras)


class _ConvCall(_KeptCalls):
    """The prepared call of a 2-D float Conv whose shapes are static: its recipe's calls, made once
    per arena set when bound. Called unbound (its input the result of a kernel), it keeps the
    calls it made for the last arrays it got: a method stores kernel results in the same arena
    views at every run, so they are made once there too (ShuffleNet's convs after Slice and
    Reshape: 56 of them took 2-3 ms a run to make their calls). With an ``epilogue`` its output
    is the epilogue op's and the op's other inputs follow the conv's (``with_epilogue``)."""

    __slots__ = ("epilogue", "last", "n_conv", "recipe")

    def __init__(self, recipe: _ConvRecipe, epilogue: _Epilogue | None = None, n_conv: int = 3):
        self.recipe, self.epilogue, self.n_conv = recipe, epilogue, n_conv
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    def with_epilogue(
        self, op_type: str, attrs: dict, n_conv: int, extras: list, rank: int = 4
    ) -> _ConvCall | None:
        """This conv followed by ``op_type`` (its first input this conv's result, of ``rank``
        dimensions, its others of specs ``extras``) as one call, or None where that op is not
        one a recipe applies."""
        epilogue = _epilogue(op_type, attrs, extras, self.recipe.dtype, rank)
        if epilogue is None:
            return None
        if self.epilogue is not None:  # an op after the one fused already: n_conv counts its inputs
            return _ConvCall(self.recipe, self.epilogue.followed_by(epilogue), self.n_conv)
        return _ConvCall(self.recipe, epilogue, n_conv)

    def _calls(self, out, args) -> tuple:
        buffers = _arena_buffers(out)  # another thread may run this set later, never two at once
        x, w, b, finish = self.parts(out, args, buffers)
        return tuple(self.recipe.calls(out, x, w, b, buffers, finish))

    def parts(self, out, args, buffers) -> tuple:
        """(x, w, b or None, finish or None) of this call's arguments, checked against the recipe
        (``out`` too unless None); ``finish(part)`` makes the epilogue's calls on a part."""
        conv, extras = args[: self.n_conv], args[self.n_conv :]
        x, w, b = conv if len(conv) == 3 else (*conv, None)
        self._check(out, x, w, b)
        finish = None
        if self.epilogue is not None:
            extras = scalar_extras(extras, self.recipe.dtype)
            epilogue = self.epilogue

            def finish(part):
                return epilogue.calls(part, extras, buffers)

        return x, w, b, finish

    def _check(self, out, x, w, b) -> None:
        recipe = self.recipe
        # x is None where the conv reads another conv's sums where they are (``_ConvChain``)
        if (x is not None and x.shape != recipe.x_shape) or w.shape != recipe.w_shape:
            raise TypeError("not the declared shapes")
        if out is not None and out.shape != recipe.out_shape:
            raise TypeError("not the declared shapes")
        if (
            (x is not None and x.dtype != recipe.dtype)
            or w.dtype != recipe.dtype
            or (b is not None and b.dtype != recipe.dtype)
        ):
            raise TypeError("not the declared types")
        if b is not None and b.shape != (recipe.w_shape[0],):
            raise TypeError("not the declared bias shape")


class _ConvChain(_KeptCalls):
    """A depthwise Conv on the ``last`` path (with its epilogue, if any) whose result only a
    pointwise Conv reads, as one prepared call: the pointwise product reads the depthwise sums
    where they are, channels-last in the accumulator, as the transposed operand of its BLAS
    product, (M, C) @ (C, pixels) with the pixels Cp floats apart (one product per group, as
    numpy's stacked product makes one per group: ShuffleNet's grouped 1 x 1 convs); the depthwise
    result is never copied out to its own tensor (a transposing copy of all of it). A depthwise
    conv on the ``rows`` path at stride 1 is chained too, computed the ``last`` way: there one
    einsum sums all the taps in the weights' order, the rows path's order, with the same bits,
    and without the copy out the transposing copy in costs less than the rows' two passes a
    tap save (MobileNetV2's 32 x 112 x 112). A product
    with a transposed operand gives OpenBLAS's bits of the contiguous one (the same kernel and
    blocking, only the packing reads differently), and the epilogue is elementwise, so the
    result is the two steps' bit for bit (tests/runtime/test_conv_chain.py checks it against
    offload.evaluate). The CPU executor pairs the two steps (runtime/fusions.py,
    ``_fuse_depthwise_pointwise``); the graph keeps both. Its arguments are the depthwise
    call's (x, weights, bias, epilogue inputs), then the pointwise call's after its input."""

    __slots__ = ("depthwise", "last", "n_first", "pointwise")

    def __init__(self, depthwise: _ConvCall, pointwise: _ConvCall, n_first: int):
        self.depthwise, self.pointwise, self.n_first = depthwise, pointwise, n_first
        self.last = None  # (out, args, calls): one tuple, replaced whole (threads)

    @staticmethod
    def fits(depthwise, pointwise) -> bool:
        """Whether a chain of these two calls (their plans) is one this class runs."""
        if type(depthwise) is not _ConvCall or type(pointwise) is not _ConvCall:
            return False
        first, second = depthwise.recipe, pointwise.recipe
        return (
            (first.path == "last" or (first.path == "rows" and first.g.strides == (1, 1)))
            and second.path == "pointwise"
            and not second.bias_in_product(pointwise.n_conv == 3)  # the chain adds the bias after
            and first.dtype == second.dtype
            and first.out_shape == second.x_shape
        )

    def _calls(self, out, args) -> tuple:
        buffers = _arena_buffers(out)
        x, w, b, finish = self.depthwise.parts(None, args[: self.n_first], buffers)
        _, w2, b2, finish2 = self.pointwise.parts(out, (None,) + args[self.n_first :], buffers)
        first, second = self.depthwise.recipe, self.pointwise.recipe
        m, c, group = second.w_shape[0], second.x_shape[1], second.group
        mg, cg = m // group, c // group
        calls = []
        if first.x_shape[0] > 1 and np.may_share_memory(out, x):  # images after the first read late
            copy = buffers.get(("input",), first.x_shape, first.dtype)
            calls.append(functools.partial(np.copyto, copy, x))
            x = copy
        weights = w2.reshape(group, mg, cg)

        def consume(i, sums):  # sums: (C, pixels), a view of the accumulator, pixels Cp floats apart
            results = out[i].reshape(group, mg, -1)
            return [
                functools.partial(np.matmul, weights[k], sums[k * cg : (k + 1) * cg], results[k])
                for k in range(group)
            ]

        if first.path == "rows":  # stride 1: one einsum sums the taps in the rows path's order
            first = _ConvRecipe(first.x_shape, first.w_shape, first.dtype, first.g, first.group)
            first.path = "last"
        calls += first.last(None, x, w, b, buffers, False, finish, consume)
        if b2 is not None:
            calls.append(functools.partial(np.add, out, b2.reshape(1, m, 1, 1), out))
        if finish2 is not None:
            calls.extend(finish2(out))
        return tuple(calls)


def _height_one(shape: tuple) -> tuple:
    """A 1-D Conv's (N, C, L) shape as the 2-D one of height 1: (N, C, 1, L)."""
    return (*shape[:2], 1, *shape[2:])


def _attrs_2d(attrs: dict) -> dict:
    """A 1-D Conv's attributes for the 2-D conv of height 1 that computes the same sums: each
    output is the same products over the same taps, in the same order."""
    kernel, pads = attrs["kernel_shape"], attrs["pads"]
    return {
        **attrs,
        "kernel_shape": [1, *kernel] if kernel else kernel,
        "pads": [0, pads[0], 0, pads[1]] if pads else pads,
        "strides": [1, *attrs["strides"]] if attrs["strides"] else attrs["strides"],
        "dilations": [1, *attrs["dilations"]] if attrs["dilations"] else attrs["dilations"],
    }


class _Conv1dCall:
    """A 1-D Conv's prepared call: the 2-D call of height 1 (``_conv_prepared``) on views of its
    arrays, the views kept for the arrays it got last (the 2-D call keeps its numpy calls by the
    identity of its arrays)."""

    __slots__ = ("inner", "last")

    def __init__(self, inner: _ConvCall):
        self.inner, self.last = inner, None

    def _views(self, arrays: tuple) -> tuple:
        last = self.last
        if last is None or len(last[0]) != len(arrays) or any(a is not k for a, k in zip(arrays, last[0])):
            views = tuple(
                a.reshape(_height_one(a.shape)) if k < 3 and a.ndim == 3 else a for k, a in enumerate(arrays)
            )
            last = self.last = (arrays, views)
        return last[1]

    def __call__(self, out, x, w, *rest):
        return self.inner(*self._views((out, x, w)), *rest)

    def bind(self, out, x, w, *rest):
        return self.inner.bind(*(a.reshape(_height_one(a.shape)) for a in (out, x, w)), *rest)

    def with_epilogue(self, op_type: str, attrs: dict, n_conv: int, extras: list):
        inner = self.inner.with_epilogue(op_type, attrs, n_conv, extras, rank=3)
        return None if inner is None else _Conv1dCall(inner)


@prepared("Conv")
def _conv_prepared(attrs, inputs, output):
    """A _ConvCall for a 2-D Conv of float32 or float64 whose inputs and output are all of one
    type and of static shapes; None otherwise (the kernel runs it)."""
    if len(inputs) not in (2, 3) or any(spec is None for spec in inputs) or output is None:
        return None
    (dtype, x_shape), (w_dtype, w_shape) = inputs[:2]
    if len(x_shape) == 3 and len(w_shape) == 3 and len(output[1]) == 3:
        flat = [(dtype, _height_one(x_shape)), (w_dtype, _height_one(w_shape)), *inputs[2:]]
        inner = _conv_prepared(_attrs_2d(attrs), flat, (output[0], _height_one(tuple(output[1]))))
        return None if inner is None else _Conv1dCall(inner)
    if dtype not in (np.float32, np.float64) or len(x_shape) != 4 or len(w_shape) != 4:
        return None
    if w_dtype != dtype or output[0] != dtype or (len(inputs) == 3 and inputs[2][0] != dtype):
        return None
    recipe = _recipe_for("Conv", attrs, x_shape, w_shape, dtype)
    if recipe is None:
        return None
    if recipe.out_shape != tuple(output[1]) or (len(inputs) == 3 and tuple(inputs[2][1]) != (w_shape[0],)):
        return None
    return _ConvCall(recipe)


def _conv(op, x, w, auto_pad, dilations, group, kernel_shape, pads, strides, ctx=None, b=None):
    """Conv's sums of x with w plus the bias b (or None): by a recipe (``_ConvRecipe``) in 2-D when x
    and w are both float32 or both float64, by ``_conv_product`` otherwise."""
    if x.ndim == 3 and w.ndim == 3 and x.dtype == w.dtype and x.dtype in (np.float32, np.float64):
        # as the 2-D conv of height 1, the prepared call's way (_Conv1dCall): the same bits
        flat = _attrs_2d(
            {"kernel_shape": kernel_shape, "pads": pads, "strides": strides, "dilations": dilations}
        )
        x4, w4 = x.reshape(_height_one(x.shape)), w.reshape(_height_one(w.shape))
        g = _geometry(
            op,
            x4.shape,
            flat["kernel_shape"] or w4.shape[2:],
            auto_pad,
            flat["dilations"],
            flat["pads"],
            flat["strides"],
        )
        dest = None if ctx is None else out_for(ctx, 0, x.shape[:1] + w.shape[:1] + g.out[1:], x.dtype)
        if dest is not None and not dest.flags.c_contiguous:
            dest = None
        dest4 = None if dest is None else dest.reshape(_height_one(dest.shape))
        bias = None if b is None else np.ascontiguousarray(b, x.dtype).reshape(-1)
        y = _conv_by_recipe(x4, w4, bias, g, group, dest4)
        return y.reshape(y.shape[:2] + y.shape[3:]) if dest is None else dest
    g = _geometry(op, x.shape, kernel_shape or w.shape[2:], auto_pad, dilations, pads, strides)
    dest = None if ctx is None else out_for(ctx, 0, x.shape[:1] + w.shape[:1] + g.out, x.dtype)
    if x.ndim == 4 and w.ndim == 4 and x.dtype == w.dtype and x.dtype in (np.float32, np.float64):
        bias = None if b is None else np.ascontiguousarray(b, x.dtype).reshape(-1)
        return _conv_by_recipe(x, w, bias, g, group, dest)
    y = _conv_product(x, w, g, group, dest)
    if b is not None:
        y += _channel_bias(b, x.ndim - 2)
    return y


@kernel("Conv")
def conv(ctx, X, W, B=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    b = None if B is None else widened(B)
    y = _conv("Conv", widened(X), widened(W), auto_pad, dilations, group, kernel_shape, pads, strides, ctx, b)
    return y.astype(X.dtype, copy=False)


def _integer_conv(
    op, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group, kernel_shape, pads, strides
):
    """Convolution of zero-point-shifted integers, exact: in float32 where the sums allow
    (``linalg.exact_float``: every sum of the kernel's taps below 2**24), else float64; padding
    reads the zero point."""
    x = shifted(x, x_zero_point)
    if w_zero_point is not None and np.ndim(w_zero_point) == 1:  # one per output channel
        w_zero_point = np.asarray(w_zero_point).reshape((-1,) + (1,) * (np.ndim(w) - 1))
    w = shifted(w, w_zero_point)
    dtype = exact_float(prod(w.shape[1:]), x, w)
    y = _conv(op, x.astype(dtype), w.astype(dtype), auto_pad, dilations, group, kernel_shape, pads, strides)
    return y.astype(np.float64, copy=False)


@kernel("ConvInteger")
def conv_integer(
    ctx,
    x,
    w,
    x_zero_point=None,
    w_zero_point=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    pads,
    strides,
):
    y = _integer_conv(
        "ConvInteger",
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    return y.astype(np.int32)


@kernel("QLinearConv")
def qlinear_conv(
    ctx,
    x,
    x_scale,
    x_zero_point,
    w,
    w_scale,
    w_zero_point,
    y_scale,
    y_zero_point,
    B=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    pads,
    strides,
):
    nd = x.ndim - 2
    acc = _integer_conv(
        "QLinearConv",
        x,
        w,
        x_zero_point,
        w_zero_point,
        auto_pad,
        dilations,
        group,
        kernel_shape,
        pads,
        strides,
    )
    if B is not None:
        acc += np.asarray(B, np.float64).reshape((1, -1) + (1,) * nd)
    ws = np.asarray(w_scale, np.float64)
    if ws.ndim == 1:
        ws = ws.reshape((1, -1) + (1,) * nd)
    scale = np.asarray(x_scale, np.float64) * ws / np.asarray(y_scale, np.float64)
    return saturate(acc * scale + np.asarray(y_zero_point, np.float64), np.asarray(y_zero_point).dtype)


def _transpose_pads(auto_pad, pads, output_shape, size, strides, full):
    """(begin, end) crops of the full ConvTranspose result; a negative one extends it with zeros."""
    nd = len(size)
    if output_shape:
        target = tuple(int(v) for v in output_shape)[-nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = tuple(i * s for i, s in zip(size, strides))
    elif auto_pad in ("NOTSET", "", "VALID"):
        p = _ints(pads if auto_pad != "VALID" else None, 2 * nd, 0)
        return p[:nd], p[nd:]
    else:
        raise unsupported("ConvTranspose", f"auto_pad={auto_pad!r}")
    begin, end = [], []
    for f, t in zip(full, target):
        total = f - t
        if total < 0:
            # A target larger than the full result grows it at the end, like output_padding.
            begin.append(0)
            end.append(total)
            continue
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


@kernel("ConvTranspose")
def conv_transpose(
    ctx,
    X,
    W,
    B=None,
    *,
    auto_pad,
    dilations,
    group,
    kernel_shape,
    output_padding,
    output_shape,
    pads,
    strides,
):
    x, w = widened(X), widened(W)
    n, c = x.shape[:2]
    size = x.shape[2:]
    nd = len(size)
    kernel = tuple(int(k) for k in (kernel_shape or w.shape[2:]))
    strides = _ints(strides, nd, 1)
    dilations = _ints(dilations, nd, 1)
    extra = _ints(output_padding, nd, 0)
    if group < 1 or c % group or w.shape[0] != c:
        raise ShapeError(
            f"ConvTranspose: input with {c} channels, weights of shape {w.shape} and group={group} do not fit"
        )
    cg, mg = c // group, w.shape[1]
    # Every input pixel times the kernel: (G, N*size, C/G) @ (G, C/G, M/G*kernel).
    a = x.reshape((n, group, cg, prod(size))).transpose(1, 0, 3, 2).reshape(group, -1, cg)
    cols = np.matmul(a, w.reshape(group, cg, -1)).reshape((group, n) + size + (mg,) + kernel)
    size_axes, kernel_axes = tuple(range(2, 2 + nd)), tuple(range(3 + nd, 3 + 2 * nd))
    cols = cols.transpose((1, 0, 2 + nd) + kernel_axes + size_axes).reshape((n, group * mg) + kernel + size)

    full = tuple(
        s * (i - 1) + e + (k - 1) * d + 1 for i, s, e, k, d in zip(size, strides, extra, kernel, dilations)
    )
    begin, end = _transpose_pads(auto_pad, pads, output_shape, size, strides, full)
    if min(begin) < 0:
        raise unsupported("ConvTranspose", f"negative pads {tuple(pads)}")
    # A negative end pad grows the result with zeros at the end. Strides and dilations are
    # attributes: bounded before the buffer is made, as a window op's padded input.
    shape = check_result(
        (n, group * mg) + tuple(f + max(0, -e) for f, e in zip(full, end)), x.dtype, "ConvTranspose"
    )
    buf = np.zeros(shape, x.dtype)
    _scatter_windows(buf, cols, strides, dilations)
    y = buf[(slice(None), slice(None)) + tuple(slice(b, f - e) for b, f, e in zip(begin, full, end))]
    if B is not None:
        y = y + _channel_bias(B, nd)
    return np.ascontiguousarray(y).astype(X.dtype, copy=False)


@kernel("Col2Im")
def col2im(ctx, input, image_shape, block_shape, *, dilations, pads, strides):
    x = widened(input)
    image = tuple(int(v) for v in image_shape)
    block = tuple(int(v) for v in block_shape)
    nd = len(image)
    strides = _ints(strides, nd, 1)
    dilations = _ints(dilations, nd, 1)
    p = _ints(pads, 2 * nd, 0)
    begin, end = p[:nd], p[nd:]
    blocks = tuple(
        (i + b + e - (k - 1) * d - 1) // s + 1
        for i, b, e, k, d, s in zip(image, begin, end, block, dilations, strides)
    )
    n, ck, length = x.shape
    if ck % prod(block) or length != prod(blocks):
        raise ShapeError(f"Col2Im: input of shape {x.shape} does not fit blocks {block} over image {image}")
    cols = x.reshape((n, ck // prod(block)) + block + blocks)
    buf = np.zeros((n, cols.shape[1]) + tuple(i + b + e for i, b, e in zip(image, begin, end)), x.dtype)
    _scatter_windows(buf, cols, strides, dilations)
    y = buf[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(begin, image))]
    return np.ascontiguousarray(y).astype(input.dtype, copy=False)


@kernel("CausalConvWithState")
def causal_conv_with_state(ctx, input, weight, bias=None, past_state=None, *, activation):
    if activation not in ("none", "silu", "swish"):
        raise unsupported("CausalConvWithState", f"activation={activation!r}")
    x, w = widened(input), widened(weight)
    n, c, _ = x.shape
    k = w.shape[-1]
    if w.shape != (c, 1, k):
        raise ShapeError(
            f"CausalConvWithState: weight of shape {w.shape} does not fit input of shape {x.shape}"
        )
    past = np.zeros((n, c, k - 1), x.dtype) if past_state is None else widened(past_state)
    seq = np.concatenate([past, x], axis=2)
    # Depthwise: each channel's windows dotted with its own kernel.
    y = np.einsum("nclk,ck->ncl", sliding_window_view(seq, k, axis=2), w[:, 0])
    if bias is not None:
        y = y + widened(bias)[:, None]
    if activation != "none":
        y = y / (1 + np.exp(-y))
    present = seq[:, :, seq.shape[2] - (k - 1) :]
    return y.astype(input.dtype, copy=False), present.astype(input.dtype, copy=False)
