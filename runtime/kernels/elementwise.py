"""Elementwise kernels: unary math, arithmetic, comparison, logic, bitwise, casts, activations.

Inputs broadcast the numpy way. ONNX keeps an op's element type, so every result is cast
back to its input's type. The narrow floats (float16, bfloat16, float8 ...) are computed in
float32 and rounded once at the end.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

from offload.ir import DataType

from . import UfuncCall, kernel, prepared
from ._util import compiled_loops, filled, out_for, same_view, unsupported
from .approximations import _erf, _gelu_exact, _sigmoid32, _tanh32

# ---------------------------------------------------------------- helpers

_NARROW_FLOATS = {
    np.dtype(t)
    for t in (
        np.float16,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
        ml_dtypes.float8_e8m0fnu,
        ml_dtypes.float4_e2m1fn,
    )
}


def _as(dtype, y) -> np.ndarray:
    """``y`` as an ndarray of ``dtype`` (ufuncs turn 0-d arrays into scalars)."""
    return np.asarray(y).astype(dtype, copy=False)


def _same(x, y) -> np.ndarray:
    """numpy's result cast back to the input's element type (ONNX keeps the dtype)."""
    return _as(np.asarray(x).dtype, y)


def _writes_c_order(*xs) -> bool:
    """Whether numpy computes on ``xs`` directly into a C-ordered result.

    Then the result may go into a planned (C-ordered) buffer and stay bit-identical to a fresh
    one: the narrow floats widen first, and a non-contiguous operand gives numpy's result its
    own layout, which the kernels after it (a matmul's summation order) can tell apart.
    """
    for x in xs:  # a loop, not all(...): this runs once per elementwise op
        kind = x.dtype.kind
        if not x.flags.c_contiguous or not (kind in "iu" or (kind == "f" and x.dtype not in _NARROW_FLOATS)):
            return False
    return True


def _up(x) -> np.ndarray:
    """``x`` in a type numpy computes well in: the narrow floats widen to float32."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype in _NARROW_FLOATS else x


def _unary(fn):
    """A kernel applying ``fn`` to its one input, keeping the input's element type."""
    writes_out = isinstance(fn, np.ufunc)

    def run(ctx, x):
        x = np.asarray(x)
        out = out_for(ctx, 0, x.shape, x.dtype) if writes_out and _writes_c_order(x) else None
        if out is not None:
            return fn(x, out=out)
        return _same(x, fn(_up(x)))

    return run


def _binary(fn):
    """A kernel applying ``fn`` to two broadcast inputs, keeping the first input's type."""

    def run(ctx, a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype == b.dtype and _writes_c_order(a, b):
            out = out_for(ctx, 0, np.broadcast_shapes(a.shape, b.shape), a.dtype)
            if out is not None:
                return fn(a, b, out=out)
        return _same(a, fn(_up(a), _up(b)))

    return run


def _plain(spec) -> bool:
    """A known, static type numpy computes in directly (no widening of a narrow float)."""
    return spec is not None and spec[0].kind in "iuf" and spec[0] not in _NARROW_FLOATS


def _ufunc_call(fn):
    """The prepared call of a ``_unary`` / ``_binary`` ufunc kernel: the ``out=`` branch it takes
    on C-contiguous inputs of the output's type. ``casting="no"`` refuses (TypeError) a value of
    another type than the file declares; the method then runs the kernel."""

    def factory(attrs, inputs, output):
        if not _plain(output) or not all(_plain(s) and s[0] == output[0] for s in inputs):
            return None
        return UfuncCall(fn)

    return factory


def _predicate(fn):
    """A kernel whose result is a bool tensor (comparisons, logic, IsNaN)."""

    def run(ctx, *args):
        return _as(np.bool_, fn(*(_up(a) for a in args)))

    return run


# ---------------------------------------------------------------- unary math

_UNARY = {
    "Abs": np.abs,
    "Neg": np.negative,
    "Sign": np.sign,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.round,  # numpy rounds half to even, as ONNX asks
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Erf": _erf,
    "BitwiseNot": np.invert,
}
for _name, _fn in _UNARY.items():
    kernel(_name)(_unary(_fn))
    if isinstance(_fn, np.ufunc):
        prepared(_name)(_ufunc_call(_fn))


@kernel("IsInf")
def isinf(ctx, X, *, detect_negative, detect_positive):
    x = _up(X)
    hit = np.zeros(x.shape, dtype=bool)
    if detect_positive:
        hit |= x == np.inf
    if detect_negative:
        hit |= x == -np.inf
    return hit


# ---------------------------------------------------------------- binary arithmetic

for _name, _fn in {
    "Add": np.add,  # its prepared call: add_prepared.py (with an activation after it)
    "Sub": np.subtract,
    "Mul": np.multiply,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}.items():
    kernel(_name)(_binary(_fn))
    if _name != "Add":
        prepared(_name)(_ufunc_call(_fn))


@kernel("Div")
def div(ctx, A, B):
    a, b = _up(A), _up(B)
    if a.dtype.kind not in "iu":
        return _same(A, np.true_divide(a, b))
    # Integer division truncates toward zero (C), numpy's floor division rounds down.
    with np.errstate(divide="ignore"):
        q = np.floor_divide(a, b)
        inexact = np.remainder(a, b) != 0
    q = q + (inexact & ((a < 0) != (b < 0)))
    return _same(A, q)


@kernel("Mod")
def mod(ctx, A, B, *, fmod):
    a, b = _up(A), _up(B)
    with np.errstate(divide="ignore", invalid="ignore"):
        if fmod == 1:
            return _same(A, np.fmod(a, b))
        if fmod != 0:
            raise unsupported("Mod", f"fmod={fmod}")
        # numpy's remainder is the floored modulo, with the spec's signed zeros and infinities.
        return _same(A, np.remainder(a, b))


@prepared("Pow")
def _pow_prepared(attrs, inputs, output):
    # floats of one type only: the kernel's integer powers treat negative exponents apart
    if output is None or output[0].kind != "f":
        return None
    return _ufunc_call(np.power)(attrs, inputs, output)


@kernel("Pow")
def pow_(ctx, X, Y):
    x, y = _up(X), _up(Y)
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        # A negative exponent makes a fraction that truncates toward zero (C's pow, then a cast).
        neg = y < 0
        if np.any(neg):
            frac = np.trunc(np.power(x.astype(np.float64), y.astype(np.float64)))
            whole = np.power(x, np.where(neg, 0, y).astype(x.dtype))
            return _same(X, np.where(neg, frac, whole))
        return _same(X, np.power(x, y.astype(x.dtype)))
    if x.dtype.kind in "iu":
        return _same(X, np.power(x.astype(np.float64), y))
    return _same(X, np.power(x, y))


@kernel("BitShift")
def bitshift(ctx, X, Y, *, direction):
    x = np.asarray(X)
    if direction not in ("LEFT", "RIGHT"):
        raise unsupported("BitShift", f"direction {direction!r}")
    bits = x.dtype.itemsize * 8
    y = np.asarray(Y).astype(np.int64)
    # A shift outside [0, bits) leaves only the sign fill: -1 for a right shift of a
    # negative value, 0 otherwise. numpy (like C) leaves those shifts undefined.
    valid = (y >= 0) & (y < bits)
    amount = np.where(valid, y, 0).astype(x.dtype)
    if direction == "LEFT":
        # Shift the unsigned bit pattern so bits past the sign bit drop off without overflow.
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        shifted = np.left_shift(x.view(unsigned), amount.view(unsigned)).view(x.dtype)
        fill = np.zeros((), x.dtype)
    else:
        shifted = np.right_shift(x, amount)
        fill = np.where(x < 0, -1, 0).astype(x.dtype)
    return _same(x, np.where(valid, shifted, fill))


# ---------------------------------------------------------------- variadic


def _fold(fn, inputs, ctx=None) -> np.ndarray:
    """``fn`` folded over the inputs, broadcast to their common shape (one input included)."""
    vals = [_up(v) for v in inputs]
    shape = np.broadcast_shapes(*(v.shape for v in vals))
    dest = None
    if (
        ctx is not None
        and len(vals) > 1
        and all(v.dtype == vals[0].dtype for v in vals)
        and _writes_c_order(*vals)
    ):
        dest = out_for(ctx, 0, shape, vals[0].dtype)
    out = vals[0]
    for v in vals[1:]:
        out = fn(out, v, out=dest)
    return out if out.shape == shape else np.broadcast_to(out, shape).copy()


@kernel("Max")
def max_(ctx, *data_0):
    return _same(data_0[0], _fold(np.maximum, data_0))


@kernel("Min")
def min_(ctx, *data_0):
    return _same(data_0[0], _fold(np.minimum, data_0))


@kernel("Sum")
def sum_(ctx, *data_0):
    return _same(data_0[0], _fold(np.add, data_0, ctx))


@kernel("Mean")
def mean(ctx, *data_0):
    return _same(data_0[0], _fold(np.add, data_0) / len(data_0))


# ---------------------------------------------------------------- comparison and logic

# (predicate_prepared.py makes their prepared calls)
PREDICATES = {
    "Equal": np.equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "Not": np.logical_not,
    "IsNaN": np.isnan,
}
for _name, _fn in PREDICATES.items():
    kernel(_name)(_predicate(_fn))


def _pairwise_call(fn):
    """Max / Min / Sum of two inputs of the output's type: one ufunc, as ``_fold`` applies it."""
    make = _ufunc_call(fn)

    def factory(attrs, inputs, output):
        return make(attrs, inputs, output) if len(inputs) == 2 else None

    return factory


prepared("Max")(_pairwise_call(np.maximum))
prepared("Min")(_pairwise_call(np.minimum))
prepared("Sum")(_pairwise_call(np.add))  # ResNet's residual adds


# numpy's clip ufunc (np.clip wraps it in Python, 1-3 µs a call): min(max(x, lo), hi) in one pass,
# where maximum then minimum take two. With 0-d bounds it took 0.47-0.67x the time of the two
# against full operands (float32, 4.7e4 to 1.2e6 elements, numpy 2.4); 0-d arrays as fast as
# scalars, and read at each call.
_CLIP = getattr(getattr(np, "_core", np).umath, "clip", np.clip)


@prepared("Clip")
def _clip_call(attrs, inputs, output):
    """Clip with both bounds given, of the input's type: maximum, then minimum (max wins)."""
    if len(inputs) != 3 or not _plain(output) or not all(s[0] == output[0] for s in inputs):
        return None
    return _ClipCall()


class _ClipCall:
    """Scalar bounds (ReLU6's 0 and 6): one pass of the clip ufunc; bounds of other shapes:
    maximum, then minimum."""

    __slots__ = ()

    def __call__(self, out, x, lo, hi):
        if x.dtype != out.dtype or lo.dtype != out.dtype or hi.dtype != out.dtype:
            raise TypeError("not the declared types")
        if lo.ndim == 0 and hi.ndim == 0:
            _CLIP(x, lo, hi, out)
            return
        hi = hi.copy() if np.may_share_memory(hi, out) else hi  # out may reuse an input's memory
        np.maximum(x, lo, out=out, casting="no")
        np.minimum(out, hi, out=out, casting="no")

    def bind(self, out, x, lo, hi):
        if lo.ndim == 0 and hi.ndim == 0:
            return functools.partial(_CLIP, x, lo, hi, out)
        return functools.partial(self, out, x, lo, hi)


@kernel("Where")
def where(ctx, condition, X, Y):
    return _same(X, np.where(condition, X, Y))


@kernel("Clip")
def clip(ctx, input, min=None, max=None):
    x = _up(input)
    if min is not None and max is not None and np.ndim(min) == 0 and np.ndim(max) == 0:
        lo, hi = _as(x.dtype, _up(min)), _as(x.dtype, _up(max))
        if lo.dtype == x.dtype:  # the prepared call's pass, the same values
            out = out_for(ctx, 0, x.shape, x.dtype) if x.dtype == input.dtype and _writes_c_order(x) else None
            return _same(input, _CLIP(x, lo, hi, out) if out is not None else _CLIP(x, lo, hi))
    if min is not None:
        x = np.maximum(x, _up(min))
    # Applied last, so max wins when min > max (as the spec says).
    if max is not None:
        x = np.minimum(x, _up(max))
    return _same(input, x)


# ---------------------------------------------------------------- casts

_FLOAT8 = {
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
}
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_SUB_BYTE_INTS = {np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2)}
_BITS = {
    **{np.dtype(t): 4 for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn)},
    **{np.dtype(t): 2 for t in (ml_dtypes.int2, ml_dtypes.uint2)},
}
_ROUND_MODES = ("up", "down", "nearest")


def _cast(x, to: np.dtype, saturate: int = 1, round_mode: str = "up", op: str = "Cast") -> np.ndarray:
    """``x`` converted to the numpy type ``to`` by ONNX's Cast rules."""
    x = np.asarray(x)
    to = np.dtype(to)
    src_string = x.dtype == object or x.dtype.kind in "US"
    if to == object:
        return x.astype(object) if src_string else _to_strings(x)
    if src_string:
        return _from_strings(x, to)
    if x.dtype == to:
        return x
    if to == _E8M0:
        return _to_e8m0(x, saturate, round_mode, op)
    if to in _FLOAT8:
        return _to_float8(x, to, saturate)
    if x.dtype.kind == "V" and to.kind == "V":
        # ml_dtypes lacks casts among its own types: go through a type that holds both exactly,
        # int64 between the narrow integers (so out-of-range values wrap), else float32.
        both_int = x.dtype in _SUB_BYTE_INTS and to in _SUB_BYTE_INTS
        return x.astype(np.int64 if both_int else np.float32).astype(to)
    return x.astype(to)


def _to_float8(x: np.ndarray, to: np.dtype, saturate: int) -> np.ndarray:
    # Widen exactly (float64 for integers) so the value is rounded only once, to float8.
    if x.dtype.kind != "f":
        x = x.astype(np.float32 if x.dtype.kind == "V" else np.float64)
    if saturate:
        # ml_dtypes maps out-of-range values to NaN or inf; saturation clamps them (NaN stays).
        top = float(ml_dtypes.finfo(to).max)
        x = np.clip(x, -top, top)
    return x.astype(to)


def _to_e8m0(x: np.ndarray, saturate: int, round_mode: str, op: str) -> np.ndarray:
    """Power-of-two scale 2^(e-127), e in 0..254 (255 is NaN), rounded by ``round_mode``."""
    if round_mode not in _ROUND_MODES:
        raise unsupported(op, f"round_mode {round_mode!r}")
    a = np.abs(np.asarray(x, dtype=np.float64))  # the sign is not representable
    mant, exp = np.frexp(a)  # a = mant * 2**exp, mant in [0.5, 1)
    k = exp.astype(np.int64) - 1  # a = (2*mant) * 2**k
    frac = 2.0 * mant
    if round_mode == "up":
        k = k + (frac > 1.0)
    elif round_mode == "nearest":
        k = k + (frac >= 1.5)
    biased = k + 127
    nan = np.isnan(a)
    if saturate:
        biased = np.where(np.isinf(a) | (biased > 254), 254, biased)
        biased = np.where((a == 0) | (biased < 0), 0, biased)
    else:
        nan = nan | np.isinf(a) | (a == 0) | (biased > 254) | (biased < 0)
    biased = np.where(nan, 255, biased)
    return biased.astype(np.uint8).view(_E8M0)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as text: plain decimal for floats (INF, -INF, NaN for the special values)."""
    if x.dtype.kind == "V":
        x = x.astype(np.float32)
    if x.dtype.kind == "b":
        text = ["1" if v else "0" for v in x.ravel()]
    elif x.dtype.kind == "f":
        text = [_float_text(v) for v in x.ravel()]
    else:
        text = [str(v) for v in x.ravel().tolist()]
    return np.array(text, dtype=object).reshape(x.shape)


def _float_text(v) -> str:
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "INF" if v > 0 else "-INF"
    return np.format_float_positional(v, trim="-")


def _from_strings(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Numeric text (plain, scientific, INF/NaN in any case) parsed into ``to``."""
    items = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in x.ravel()]
    if to.kind in "iu":
        wide = np.uint64 if to.kind == "u" else np.int64
        values = np.array([_parse_int(s) for s in items], dtype=wide)
    else:
        values = np.array([float(s) for s in items], dtype=np.float64)
    return _cast(values.reshape(x.shape), to)


def _parse_int(s: str) -> int:
    try:
        return int(s)
    except ValueError:
        return int(float(s))  # "100.5" -> 100, as the spec allows


@kernel("Cast")
def cast(ctx, input, *, round_mode, saturate, to):
    return _cast(input, DataType(to).numpy, saturate, round_mode)


@kernel("CastLike")
def castlike(ctx, input, target_type, *, round_mode, saturate):
    return _cast(input, np.asarray(target_type).dtype, saturate, round_mode, "CastLike")


@kernel("BitCast")
def bitcast(ctx, input, *, to):
    x = np.asarray(input)
    target = DataType(to).numpy
    if x.dtype == object or target == object:
        raise unsupported("BitCast", "a string type")
    width_in = _BITS.get(x.dtype, x.dtype.itemsize * 8)
    width_out = _BITS.get(target, target.itemsize * 8)
    if width_in != width_out:
        raise unsupported("BitCast", f"{x.dtype} ({width_in} bits) to {target} ({width_out} bits)")
    # Sub-byte types sit in the low bits of one byte each, so a byte view reinterprets them too.
    return np.ascontiguousarray(x).view(target).reshape(x.shape)


@kernel("Identity")
def identity(ctx, input):
    return input


@kernel("Dropout")
def dropout(ctx, data, ratio=None, training_mode=None, *, seed):
    x = np.asarray(data)
    p = 0.5 if ratio is None else float(np.asarray(ratio))
    training = training_mode is not None and bool(np.asarray(training_mode))
    if not training or p == 0:
        out, mask = x, out_for(ctx, 1, x.shape, np.dtype(bool))
        if mask is None:
            mask = np.ones(x.shape, dtype=bool)
        else:
            mask.fill(True)
    else:
        # A seeded run draws its mask from numpy's legacy generator, uniform in [0, 1), so
        # the same seed reproduces the same mask (ONNX's test data is drawn that way).
        rng = np.random.RandomState(None if seed is None else seed & 0xFFFFFFFF)
        mask = rng.uniform(0.0, 1.0, x.shape) >= p
        out = _same(x, _up(x) * mask * (1.0 / (1.0 - p)))
    return (out, mask) if ctx.output_wanted(1) else out


# ---------------------------------------------------------------- activations


def _float32_pass(one_pass, fallback):
    """A unary kernel: of float32 values, ``one_pass(out, x)`` (one compiled pass where numba is
    there, else its numpy twin with the same bits); of others, ``fallback``."""

    def fn(x):
        x = np.asarray(x)
        if x.dtype != np.float32:
            return fallback(x)
        out = np.empty(x.shape, np.float32)
        one_pass(out, np.ascontiguousarray(x))
        return out

    return fn


def _reciprocal_of_one_plus_exp_of_minus(x):
    # numpy's exp overflows to inf for x below about -88, and 1 / inf is the 0 sigmoid rounds to
    with np.errstate(over="ignore"):
        return np.reciprocal(np.exp(-x) + 1)


# sigmoid: 1 / (1 + exp(-x)); tanh: within 1 ulp of float64's tanh rounded (measured)
_sigmoid = _float32_pass(_sigmoid32, _reciprocal_of_one_plus_exp_of_minus)
_tanh = _float32_pass(_tanh32, np.tanh)

kernel("Tanh")(_unary(_tanh))


@prepared("Tanh")
def _tanh_call(attrs, inputs, output):
    if not _plain(output) or len(inputs) != 1 or inputs[0] != output or output[0].kind != "f":
        return None
    if output[0] == np.float32:
        return Float32PassCall(_tanh32, "tanh32")
    return UfuncCall(np.tanh) if output[0] == np.float64 else None  # float16: the kernel's float32


class Float32PassCall:
    """A float32 activation into ``out`` in one pass: ``one_pass(out, x)`` (``approximations``),
    bound straight to its compiled loop ``loops.<loop>(x, out)`` where numba is there."""

    __slots__ = ("one_pass", "loop")

    def __init__(self, one_pass, loop: str):
        self.one_pass, self.loop = one_pass, loop

    def __call__(self, out, x):
        if x.dtype != np.float32 or out.dtype != np.float32 or x.shape != out.shape:
            raise TypeError("not the declared type")
        self.bind(out, x)()

    def bind(self, out, x):
        loops = compiled_loops()
        if loops is None:
            return functools.partial(self.one_pass, out, x)
        return functools.partial(getattr(loops, self.loop), x, out)


def _softplus(x):
    return np.logaddexp(0, x)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


for _name, _fn in {
    "Sigmoid": _sigmoid,
    "Softplus": _softplus,
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Mish": lambda x: x * np.tanh(_softplus(x)),
}.items():
    kernel(_name)(_unary(_fn))


def _hard_passes(out, x, alpha, beta, swish: bool, temp=None):
    """HardSigmoid's clip(alpha * x + beta, 0, 1), times x for HardSwish (alpha 1/6, beta 1/2),
    into ``out``: by the compiled loop in one pass (``loops.hard_sigmoid``, the same operations
    in the same order) where it takes these arrays, else as numpy passes (through ``temp``
    where out is x's memory): 3 passes, 4 for HardSwish, where the composed expression made 4
    or 5 arrays. MobileNetV3-Small's 21 HardSwish and 9 HardSigmoid: 0.7 ms of a run in
    passes."""
    dtype = out.dtype
    zero, one = np.zeros((), dtype), np.ones((), dtype)
    alpha, beta = dtype.type(alpha), dtype.type(beta)
    loops = compiled_loops()
    if loops is not None and _one_pass(out, x):
        return functools.partial(loops.hard_sigmoid, x, out, alpha, beta, zero[()], one[()], swish)
    t = temp if temp is not None else out

    def run():  # outputs positional: cheaper than out= (kernels.UfuncCall.bind)
        np.multiply(x, alpha, t)
        np.add(t, beta, t)
        if swish:
            _CLIP(t, zero, one, t)
            np.multiply(t, x, out)
        else:
            _CLIP(t, zero, one, out)

    return run


def _one_pass(out, x) -> bool:
    """Whether an elementwise loop may write out while it reads x: both float32 or float64,
    C-contiguous, of one shape, and out either x's very memory or apart from it."""
    if out.dtype != x.dtype or out.dtype not in (np.float32, np.float64) or out.shape != x.shape:
        return False
    if not (out.flags.c_contiguous and x.flags.c_contiguous):
        return False
    return same_view(out, x) or not np.may_share_memory(out, x)


def _hard_kernel(swish: bool):
    def run(ctx, X, *, alpha=1 / 6, beta=0.5):
        x = _up(X)
        out = out_for(ctx, 0, x.shape, x.dtype) if x.dtype == X.dtype and _writes_c_order(x) else None
        if out is None or np.may_share_memory(out, x):
            out = np.empty(x.shape, x.dtype)
        _hard_passes(out, np.ascontiguousarray(x), alpha, beta, swish)()
        return _same(X, out)

    return run


def _hard_call(swish: bool):
    def factory(attrs, inputs, output):
        if not _plain(output) or output[0].kind != "f" or len(inputs) != 1 or inputs[0] != output:
            return None
        return _HardCall(attrs.get("alpha", 1 / 6), attrs.get("beta", 0.5), swish)

    return factory


class _HardCall:
    """HardSigmoid or HardSwish into ``out`` (``_hard_passes``)."""

    __slots__ = ("alpha", "beta", "swish")

    def __init__(self, alpha, beta, swish: bool):
        self.alpha, self.beta, self.swish = alpha, beta, swish

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        self.bind(out, x)()

    def bind(self, out, x):
        temp = np.empty(out.shape, out.dtype) if np.may_share_memory(out, x) else None
        return _hard_passes(out, x, self.alpha, self.beta, self.swish, temp)


kernel("HardSwish")(_hard_kernel(swish=True))
kernel("HardSigmoid")(_hard_kernel(swish=False))
prepared("HardSwish")(_hard_call(swish=True))
prepared("HardSigmoid")(_hard_call(swish=False))


@prepared("Relu")
def _relu_call(attrs, inputs, output):
    if not _plain(output) or len(inputs) != 1 or inputs[0] != output:
        return None
    return UfuncCall(np.maximum, filled(0, *output))  # a full operand: numpy's fast loop


@prepared("Sigmoid")
def _sigmoid_call(attrs, inputs, output):
    if not _plain(output) or output[0].kind != "f" or len(inputs) != 1 or inputs[0] != output:
        return None
    if output[0] == np.float32:
        return Float32PassCall(_sigmoid32, "sigmoid32")
    return _SigmoidCall(output[0].type(1.0))


class _SigmoidCall:
    """_sigmoid's arithmetic into ``out`` for float64 and float16: four ufunc passes. exp's
    overflow is not reported: a method runs under ``np.errstate(all="ignore")``."""

    __slots__ = ("one",)

    def __init__(self, one):
        self.one = one

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared type")
        self._passes(out, x, self.one)()

    def bind(self, out, x):
        return self._passes(out, x, filled(1, out.dtype, out.shape))

    @staticmethod
    def _passes(out, x, one):
        negative, exp, add, reciprocal = np.negative, np.exp, np.add, np.reciprocal

        def run():  # outputs positional: cheaper than out= (kernels.UfuncCall.bind)
            negative(x, out)
            exp(out, out)
            add(out, one, out)
            reciprocal(out, out)

        return run


@kernel("Relu")
def relu(ctx, X):
    X = np.asarray(X)
    out = out_for(ctx, 0, X.shape, X.dtype) if _writes_c_order(X) else None
    if out is not None:
        return np.maximum(X, filled(0, X.dtype, X.shape), out=out)
    return _same(X, np.maximum(_up(X), 0))


@prepared("LeakyRelu")
def _leaky_relu_call(attrs, inputs, output):
    if not _plain(output) or output[0].kind != "f" or len(inputs) != 1 or inputs[0] != output:
        return None
    return _LeakyReluCall(np.array(attrs.get("alpha", 0.01), output[0]))


class _LeakyReluCall:
    """LeakyRelu as PRelu with its one slope (alpha in the input's type, as numpy multiplies a
    float32 array by a Python float): the kernel's ``where(x < 0, alpha · x, x)``, bit for bit."""

    __slots__ = ("alpha",)

    def __init__(self, alpha: np.ndarray):
        self.alpha = alpha

    def __call__(self, out, x):
        if x.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared types")
        self.bind(out, x)()

    def bind(self, out, x):
        return _PReluCall().bind(out, x, self.alpha)


@kernel("LeakyRelu")
def leaky_relu(ctx, X, *, alpha):
    x = _up(X)
    return _same(X, np.where(x < 0, alpha * x, x))


@prepared("PRelu")
def _prelu_call(attrs, inputs, output):
    if not _plain(output) or output[0].kind != "f" or len(inputs) != 2:
        return None
    x, slope = inputs
    if x != output or slope[0] != output[0] or np.broadcast_shapes(x[1], slope[1]) != x[1]:
        return None
    return _PReluCall()


def _one_axis(shape: tuple, slope: np.ndarray) -> tuple | None:
    """(outer, C, inner) of ``shape`` where ``slope`` broadcast to it varies along one axis
    only (C its size; C = 1 for a single slope), else None."""
    dims = (1,) * (len(shape) - slope.ndim) + slope.shape
    varying = [a for a, d in enumerate(dims) if d != 1]
    if len(varying) > 1 or len(dims) != len(shape):
        return None
    if not varying:  # one slope: one run over everything, the loop's inner axis
        return (1, 1, math.prod(shape))
    a = varying[0]
    return (math.prod(shape[:a]), shape[a], math.prod(shape[a + 1 :]))


class _PReluCall:
    """The kernel's ``where(x < 0, x · slope, x)`` into ``out``: one pass of the compiled loop
    where the slope varies along one axis (``loops.prelu``); else as a select on the bits: the
    products, a mask of all ones where x < 0, then ``x ^ ((x ^ products) & mask)``. Every pass
    is a plain SIMD loop (numpy's ``where`` and masked ``copyto`` branch per element: 6x
    slower on a 96 x 96 x 16 activation), and each element is x or its product, bit for bit.
    (``maximum(x, x · slope)`` would do where every slope is at most 1, but numpy's maximum
    does not keep one operand on ties of signed zeros.)"""

    __slots__ = ()

    def __call__(self, out, x, slope):
        if x.dtype != out.dtype or slope.dtype != out.dtype or x.shape != out.shape:
            raise TypeError("not the declared types")
        self.bind(out, x, slope)()

    def bind(self, out, x, slope):
        loops, split = compiled_loops(), _one_axis(x.shape, slope)
        if loops is not None and split is not None and slope.flags.c_contiguous and x.flags.c_contiguous:
            x3, out3, s1 = x.reshape(split), out.reshape(split), slope.reshape(-1)
            return functools.partial(loops.prelu, x3, s1, out3)
        bits = np.dtype(f"u{out.dtype.itemsize}")
        products, mask = np.empty(out.shape, out.dtype), np.empty(out.shape, bits)
        xb, pb, ob = x.view(bits), products.view(bits), out.view(bits)
        zero = out.dtype.type(0)
        multiply, less, negative = np.multiply, np.less, np.negative
        xor, and_ = np.bitwise_xor, np.bitwise_and

        def run():  # out may be x's memory: x is read for the last time by the last pass
            multiply(x, slope, products)
            less(x, zero, out=mask, casting="unsafe")  # 1 where x < 0
            negative(mask, mask)  # all ones where x < 0
            xor(pb, xb, pb)
            and_(pb, mask, pb)
            xor(xb, pb, ob)

        return run


@kernel("PRelu")
def prelu(ctx, X, slope):
    x, s = _up(X), _up(slope)
    if x.dtype == s.dtype and x.dtype.kind == "f" and np.broadcast_shapes(x.shape, s.shape) == x.shape:
        out = np.empty(x.shape, x.dtype)
        _PReluCall().bind(out, np.ascontiguousarray(x), s)()
        return _same(X, out)
    return _same(X, np.where(x < 0, x * s, x))


@kernel("Elu")
def elu(ctx, X, *, alpha):
    x = _up(X)
    return _same(X, np.where(x < 0, alpha * np.expm1(np.minimum(x, 0)), x))


@kernel("Selu")
def selu(ctx, X, *, alpha, gamma):
    x = _up(X)
    return _same(X, gamma * np.where(x <= 0, alpha * np.expm1(np.minimum(x, 0)), x))


@kernel("Celu")
def celu(ctx, X, *, alpha):
    x = _up(X)
    return _same(X, np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)))


@kernel("ThresholdedRelu")
def thresholded_relu(ctx, X, *, alpha):
    x = _up(X)
    return _same(X, np.where(x > alpha, x, 0))


@kernel("Shrink")
def shrink(ctx, input, *, bias, lambd):
    x = _up(input)
    if x.dtype.kind in "iu":
        x = x.astype(np.float64)  # bias and lambd are floats; the result is cast back
    return _same(input, np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)))


@kernel("Swish")
def swish(ctx, X, *, alpha):
    x = _up(X)
    return _same(X, x * _sigmoid(alpha * x))


@kernel("SwiGLU")
def swiglu(ctx, A, B, *, alpha):
    a = _up(A)
    return _same(A, a * _sigmoid(alpha * a) * _up(B))


@kernel("Gelu")
def gelu(ctx, X, *, approximate):
    if approximate == "none":
        return _same(X, _gelu_exact(_up(X)))
    if approximate == "tanh":
        return _same(X, _gelu_tanh(_up(X)))
    raise unsupported("Gelu", f"approximate={approximate!r}")
