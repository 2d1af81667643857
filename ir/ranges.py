"""Bounds on every float tensor of a program, by interval arithmetic over its ops.

``annotate`` walks each block in order and gives every float value that has no ``range`` yet a
``ValueRange`` on its type: constants get their exact extremes, inputs the bounds the caller
names (unknown otherwise), and each op's outputs what its rule proves from its inputs' bounds.
A value that already has a range (seen on calibration samples, or given) keeps it, and what
follows is bounded from it. An op without a rule gives unknown bounds (±inf).

The rules are sound for every input within its bounds:

1. **Data movement** (Reshape, Transpose, Slice, Gather, Concat, Pad, MaxPool, pooling and
   reduce means, linear Resize …): the union of what they read (and the pad value).
2. **Monotonic activations** f (Relu, Sigmoid, Tanh, Elu, Exp, Log, Sqrt …): [f(lo), f(hi)];
   the others (Gelu, Mish, HardSwish, Abs, Sin …) with their global extremes where the interval
   holds them.
3. **Arithmetic**: interval sums, differences, products, quotients (a divisor interval holding 0
   gives unknown bounds).
4. **Linear ops with a constant weight** (Conv, ConvTranspose, MatMul, Gemm): per output
   channel ``Σ w⁺·hi + Σ w⁻·lo`` above and ``Σ w⁺·lo + Σ w⁻·hi`` below (w⁺, w⁻ the positive and
   negative parts; zero padding puts 0 in the input's interval), plus the bias; the extremes
   over the channels. Two computed operands: the reduction size times the product's bounds.
5. **Normalizations** reset the bounds: a value normalized over N elements has
   |x̂| ≤ √(N−1) (LayerNormalization, InstanceNormalization, GroupNormalization; √N for RMS),
   then the scale and shift bound it per channel; BatchNormalization (inference) is affine per
   channel; Softmax is in [0, 1]; an attention's output is a convex combination of V's rows.
6. **Recurrent ops** with their default activations: LSTM/GRU/RNN hidden outputs in [−1, 1]
   (union with the initial state for GRU and RNN), LSTM's cell state within the sequence
   length (|c_t| ≤ |c_0| + t).

Bounds of this kind compound through deep stacks of convolutions (each multiplies them by the
weights' absolute row sums), so for such models they are far above what real inputs reach:
``offload.calibrate`` records the ranges seen on sample inputs instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from .core import Block, Operation, Program, Value
from .registry import attributes_of
from .types import DataType, TensorType, ValueRange

INF = math.inf
UNKNOWN = (-INF, INF)
FLOATS = frozenset({DataType.FLOAT, DataType.FLOAT16, DataType.BFLOAT16, DataType.DOUBLE})

Interval = tuple[float, float]


def is_float(v: Value | None) -> bool:
    return v is not None and isinstance(v.type, TensorType) and v.type.dtype in FLOATS


def annotate(program: Program, input_ranges: Mapping[str, Interval] | None = None) -> int:
    """Give every float value of ``program`` without a range one (in place); returns how many.

    ``input_ranges`` maps a function input's name to its (lo, hi); an input it does not name and
    that has no range on its type is unbounded."""
    given = dict(input_ranges or {})
    count = 0
    for fn in program.functions.values():
        for v in fn.inputs:
            if v.name in given:
                lo, hi = (float(b) for b in given[v.name])
                if not lo <= hi:
                    raise ValueError(f"input range of '{v.name}': ({lo}, {hi}) is empty")
                count += _set(v, (lo, hi), replace=True)
        count += _block(fn.body)
    return count


def interval(v: Value) -> Interval:
    """The bounds of ``v``: its range, its constant's extremes, or unknown."""
    if isinstance(v.type, TensorType) and v.type.range is not None:
        return (v.type.range.lo, v.type.range.hi)
    if v.const_value is not None:
        return _extremes(v.const_value)
    return UNKNOWN


def _extremes(a) -> Interval:
    a = np.asarray(a)
    if a.size == 0 or a.dtype.kind not in "biuf":
        return UNKNOWN if a.size else (0.0, 0.0)
    if a.dtype.kind == "f" and np.isnan(a).any():
        return UNKNOWN
    return (float(a.min()), float(a.max()))


def _set(v: Value, bounds: Interval, replace: bool = False) -> int:
    """Record ``bounds`` on a float value's type (unless it has a range and ``replace`` is off)."""
    if not is_float(v) or (v.type.range is not None and not replace):
        return 0
    lo, hi = bounds
    if math.isnan(lo) or math.isnan(hi):
        lo, hi = UNKNOWN
    t = v.type
    v.type = TensorType(t.dtype, t.shape, t.quant, ValueRange(float(lo), float(hi)))
    return 1


def _block(block: Block) -> int:
    count = 0
    for v in block.constants.values():
        count += _set(v, _extremes(v.const_value))
    for op in block.operations:
        for sub in op.blocks:
            count += _block(sub)
        if all(v is None or not is_float(v) or v.type.range is not None for v in op.outputs):
            continue
        found = bounds(op)
        for v, b in zip(op.outputs, found):
            if v is not None:
                count += _set(v, b)
    return count


# -- the rules: each gives one interval per output --

RULES: dict[str, Callable[[Operation, list[Interval], dict], list[Interval]]] = {}


def rule(*op_types: str):
    def register(fn):
        for t in op_types:
            RULES[t] = fn
        return fn

    return register


def bounds(op: Operation) -> list[Interval]:
    """What ``op``'s outputs are bounded by, from its inputs' bounds (unknown without a rule);
    an If's outputs by both branches' results."""
    if op.op_type == "If" and op.domain in ("", "ai.onnx"):
        then, other = op.attributes["then_branch"], op.attributes["else_branch"]
        return [_union(interval(a), interval(b)) for a, b in zip(then.outputs, other.outputs)]
    fn = RULES.get(op.op_type) if op.domain in ("", "ai.onnx") else None
    if fn is None:
        return [UNKNOWN] * len(op.outputs)
    ins = [UNKNOWN if v is None else interval(v) for v in op.inputs]
    try:
        found = fn(op, ins, attributes_of(op))
    except (TypeError, ValueError, IndexError, KeyError):  # symbolic dims, odd attributes
        return [UNKNOWN] * len(op.outputs)
    return [_clean(b) for b in found] + [UNKNOWN] * (len(op.outputs) - len(found))


def _clean(b: Interval) -> Interval:
    lo, hi = float(b[0]), float(b[1])
    return UNKNOWN if math.isnan(lo) or math.isnan(hi) else (lo, hi)


def _union(*xs: Interval) -> Interval:
    return (min(x[0] for x in xs), max(x[1] for x in xs))


def _mul(a: float, b: float) -> float:
    """a · b with 0 · inf = 0 (a zero bound times an unbounded one is zero)."""
    return 0.0 if a == 0 or b == 0 else a * b


def mul(a: Interval, b: Interval) -> Interval:
    p = [_mul(x, y) for x in a for y in b]
    return (min(p), max(p))


def add(a: Interval, b: Interval) -> Interval:
    return (a[0] + b[0], a[1] + b[1])


def scale(a: Interval, k: float) -> Interval:
    return mul(a, (k, k))


def _with_zero(a: Interval) -> Interval:
    return (min(a[0], 0.0), max(a[1], 0.0))


def _size(v: Value, axes) -> float:
    """The number of elements of ``v`` along ``axes`` (inf when one is symbolic)."""
    n = 1
    for a in axes:
        d = v.type.shape[a]
        if not isinstance(d, int):
            return INF
        n *= d
    return float(n)


@rule(
    "Identity", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Gather",
    "GatherElements", "GatherND", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "MaxPool",
    "GlobalMaxPool", "ReduceMax", "ReduceMin", "AveragePool", "GlobalAveragePool", "ReduceMean",
    "Dropout", "Split", "Cast", "CastLike", "TopK", "ReverseSequence", "Compress", "Upsample",
    "Floor", "Ceil", "Round", "Shrink",
)  # fmt: skip
def _moves(op, ins, attrs):
    x = ins[0]
    if op.op_type == "Shrink":  # x ± bias beyond ±lambd, 0 inside
        b = abs(attrs["bias"])
        return [(min(x[0] - b, 0.0), max(x[1] + b, 0.0))]
    if (
        op.op_type in ("Cast", "CastLike")
        and op.inputs[0] is not None
        and op.inputs[0].type.dtype == DataType.BOOL
    ):
        return [(0.0, 1.0)]
    if op.op_type in ("Floor", "Ceil", "Round") and math.isfinite(x[0]) and math.isfinite(x[1]):
        return [(math.floor(x[0]), math.ceil(x[1]))]
    return [x] * len(op.outputs)


@rule("Concat", "Max", "Min", "Sum", "Mean")
def _variadic(op, ins, attrs):
    if op.op_type == "Concat":
        return [_union(*ins)]
    if op.op_type == "Max":
        return [(max(x[0] for x in ins), max(x[1] for x in ins))]
    if op.op_type == "Min":
        return [(min(x[0] for x in ins), min(x[1] for x in ins))]
    total = (sum(x[0] for x in ins), sum(x[1] for x in ins))
    return [total if op.op_type == "Sum" else scale(total, 1 / len(ins))]


@rule("Where")
def _where(op, ins, attrs):
    return [_union(ins[1], ins[2])]


@rule("Pad")
def _pad(op, ins, attrs):
    mode = attrs.get("mode", "constant")
    if mode != "constant":
        return [ins[0]]
    fill = ins[2] if len(ins) > 2 and op.inputs[2] is not None else (0.0, 0.0)
    return [_union(ins[0], fill)]


@rule("Resize")
def _resize(op, ins, attrs):
    if attrs.get("mode", "nearest") == "cubic":  # its weights go below 0: values overshoot
        return [UNKNOWN]
    x = ins[0]
    if (
        attrs.get("exclude_outside", 0) == 0
        and attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    ):
        x = _union(x, ins[0], (attrs.get("extrapolation_value", 0.0),) * 2)
    return [x]


@rule("ScatterND", "ScatterElements", "Scatter")
def _scatter(op, ins, attrs):
    if attrs.get("reduction", "none") not in ("none", "max", "min"):
        return [UNKNOWN]
    return [_union(ins[0], ins[2])]


@rule("Trilu", "MaxUnpool")
def _with_zeros(op, ins, attrs):
    return [_with_zero(ins[0])]


def _monotonic(f: Callable[[float], float]):
    def bound(op, ins, attrs):
        lo, hi = ins[0]
        return [(f(lo), f(hi))]

    return bound


def _safe(f: Callable[[float], float]) -> Callable[[float], float]:
    def g(x: float) -> float:
        try:
            return f(x)
        except OverflowError:
            return INF if x > 0 else -INF
        except ValueError:
            return math.nan

    return g


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


RULES.update(
    {
        "Relu": _monotonic(lambda x: max(x, 0.0)),
        "Sigmoid": _monotonic(_safe(_sigmoid)),
        "Tanh": _monotonic(lambda x: math.tanh(x) if math.isfinite(x) else math.copysign(1.0, x)),
        "Erf": _monotonic(lambda x: math.erf(x) if math.isfinite(x) else math.copysign(1.0, x)),
        "Exp": _monotonic(_safe(lambda x: math.exp(x) if x > -INF else 0.0)),
        "Log": _monotonic(_safe(lambda x: -INF if x <= 0 else math.log(x))),
        "Sqrt": _monotonic(_safe(lambda x: math.sqrt(max(x, 0.0)))),
        "Softplus": _monotonic(_safe(lambda x: x if x > 30 else math.log1p(math.exp(x)))),
        "Softsign": _monotonic(lambda x: x / (1 + abs(x)) if math.isfinite(x) else math.copysign(1.0, x)),
        "Atan": _monotonic(math.atan),
        "Asinh": _monotonic(math.asinh),
        "Sinh": _monotonic(_safe(math.sinh)),
        "Sign": _monotonic(lambda x: float(np.sign(x))),
        "Neg": lambda op, ins, attrs: [(-ins[0][1], -ins[0][0])],
    }
)


@rule("LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu", "Clip")
def _parametric(op, ins, attrs):
    lo, hi = ins[0]
    t = op.op_type
    if t == "LeakyRelu":
        a = attrs["alpha"]
        return [(min(lo, a * lo), max(hi, a * hi))] if a >= 0 else [UNKNOWN]
    if t in ("Elu", "Celu", "Selu"):  # increasing for alpha > 0
        a = attrs["alpha"]
        if a <= 0:
            return [UNKNOWN]
        g = attrs.get("gamma", 1.0) if t == "Selu" else 1.0

        def f(x: float) -> float:
            if x >= 0:
                return g * x
            return g * a * (math.exp(x / a if t == "Celu" else x) - 1) if x > -INF else -g * a

        return [(f(lo), f(hi))]
    if t == "HardSigmoid":
        a, b = attrs["alpha"], attrs["beta"]
        ends = sorted((min(max(a * lo + b, 0.0), 1.0), min(max(a * hi + b, 0.0), 1.0)))
        return [(ends[0], ends[1])]
    if t == "ThresholdedRelu":
        return [_with_zero((lo, hi)) if hi > attrs["alpha"] else (0.0, 0.0)]
    low = ins[1][0] if len(ins) > 1 and op.inputs[1] is not None else -INF
    high = ins[2][1] if len(ins) > 2 and op.inputs[2] is not None else INF
    if low == -INF and "min" in attrs:  # Clip before opset 11
        low = attrs["min"]
    if high == INF and "max" in attrs:
        high = attrs["max"]
    return [(min(max(lo, low), high), max(min(hi, high), low))]


# Non-monotonic activations: f at both ends and the global minimum (reached at a negative x).
_MINIMA = {
    "Gelu": -0.1700,  # x·Φ(x), least at x ≈ −0.75
    "Mish": -0.3089,  # x·tanh(softplus(x)), least at x ≈ −1.19
    "HardSwish": -0.375,  # x·relu6(x + 3)/6, least at x = −1.5
    "Swish": -0.2785,  # x·sigmoid(x), least at x ≈ −1.28
}


def _gelu(x: float) -> float:
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2))) if math.isfinite(x) else max(x, 0.0)


def _mish(x: float) -> float:
    if not math.isfinite(x):
        return max(x, 0.0)
    return x * math.tanh(x if x > 30 else math.log1p(math.exp(x)))


def _hard_swish(x: float) -> float:
    return x * min(max(x + 3, 0.0), 6.0) / 6 if math.isfinite(x) else max(x, 0.0)


def _swish(x: float) -> float:
    return x * _sigmoid(x) if math.isfinite(x) else max(x, 0.0)


@rule("Gelu", "Mish", "HardSwish", "Swish")
def _dip(op, ins, attrs):
    f = {"Gelu": _gelu, "Mish": _mish, "HardSwish": _hard_swish, "Swish": _swish}[op.op_type]
    lo, hi = ins[0]
    ends = (f(lo), f(hi))
    low = min(*ends, _MINIMA[op.op_type]) if lo < 0 < hi or lo < -0.5 else min(ends)
    return [(low, max(ends))]


@rule("Abs")
def _abs(op, ins, attrs):
    lo, hi = ins[0]
    if lo >= 0:
        return [(lo, hi)]
    if hi <= 0:
        return [(-hi, -lo)]
    return [(0.0, max(-lo, hi))]


@rule("Sin", "Cos")
def _trig(op, ins, attrs):
    return [(-1.0, 1.0)]


@rule("Reciprocal")
def _reciprocal(op, ins, attrs):
    lo, hi = ins[0]
    if lo <= 0 <= hi:
        return [UNKNOWN]
    return [(1 / hi, 1 / lo)]


@rule("Add", "Sub", "Mul", "Div")
def _arith(op, ins, attrs):
    a, b = ins[0], ins[1]
    t = op.op_type
    if t == "Add":
        return [add(a, b)]
    if t == "Sub":
        return [(a[0] - b[1], a[1] - b[0])]
    if t == "Mul":
        return [mul(a, b)]
    if b[0] <= 0 <= b[1]:
        return [UNKNOWN]
    return [mul(a, (1 / b[1], 1 / b[0]))]


@rule("Pow")
def _pow(op, ins, attrs):
    (lo, hi), (plo, phi) = ins[0], ins[1]
    if plo != phi:
        return [UNKNOWN]
    p = plo
    if p == int(p) and p >= 0:
        k = int(p)
        ends = (
            lo**k if math.isfinite(lo) else math.copysign(INF, lo) ** k,
            hi**k if math.isfinite(hi) else INF,
        )
        if k % 2 == 0:
            return [(0.0 if lo <= 0 <= hi else min(ends), max(ends))]
        return [(min(ends), max(ends))]
    if lo >= 0 and p > 0:
        return [(lo**p, hi**p)]
    return [UNKNOWN]


@rule("Softmax")
def _softmax(op, ins, attrs):
    return [(0.0, 1.0)]


@rule("LogSoftmax")
def _log_softmax(op, ins, attrs):
    lo, hi = ins[0]
    n = _size(op.inputs[0], [attrs["axis"]])
    return [(lo - hi - math.log(n), 0.0)]


@rule("ReduceSum", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")
def _reduce(op, ins, attrs):
    x = op.inputs[0]
    axes = _reduce_axes(op, attrs)
    n = _size(x, axes)
    lo, hi = ins[0]
    mag = max(abs(lo), abs(hi))
    t = op.op_type
    if t == "ReduceSum":
        return [(_mul(n, lo) if lo < 0 else lo, _mul(n, hi) if hi > 0 else hi)]
    if t == "ReduceL1":
        return [(0.0, _mul(n, mag))]
    if t == "ReduceL2":
        return [(0.0, _mul(math.sqrt(n), mag))]
    if t == "ReduceSumSquare":
        return [(0.0, _mul(n, mag * mag))]
    return [(lo, hi + math.log(n))]


def _reduce_axes(op: Operation, attrs: dict) -> list[int]:
    rank = len(op.inputs[0].type.shape)
    axes = attrs.get("axes")
    if len(op.inputs) > 1 and op.inputs[1] is not None:
        if op.inputs[1].const_value is None:
            raise ValueError("axes computed at run time")
        axes = op.inputs[1].const_value.tolist()
    if not axes:
        return [] if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return [a % rank for a in axes]


def _linear(x: Interval, w: np.ndarray, sum_axes: tuple[int, ...], bias=None) -> Interval:
    """Bounds of Σ w·x over ``sum_axes`` of constant ``w`` for x in ``x``, per remaining index,
    plus ``bias`` (a constant broadcast against the sums, or None); their extremes."""
    w = np.asarray(w, np.float64)
    pos = np.where(w > 0, w, 0).sum(axis=sum_axes)
    neg = np.where(w < 0, w, 0).sum(axis=sum_axes)
    lo, hi = x
    with np.errstate(invalid="ignore", over="ignore"):
        top = _times(pos, hi) + _times(neg, lo)
        bottom = _times(pos, lo) + _times(neg, hi)
        if bias is not None:
            b = np.asarray(bias, np.float64).reshape(-1)
            if b.size in (1, top.size):
                top, bottom = top.reshape(-1) + b, bottom.reshape(-1) + b
            else:
                top, bottom = top.max() + b.max(), bottom.min() + b.min()
    if np.isnan(top).any() or np.isnan(bottom).any():
        return UNKNOWN
    return (float(np.min(bottom)), float(np.max(top)))


def _times(w: np.ndarray, x: float) -> np.ndarray:
    """w · x elementwise with 0 · inf = 0."""
    return np.where(w == 0, 0.0, w * x)


def _const(v: Value | None):
    return None if v is None else v.const_value


@rule("Conv")
def _conv(op, ins, attrs):
    w = _const(op.inputs[1])
    b = _const(op.inputs[2]) if len(op.inputs) > 2 else None
    x = _with_zero(ins[0])  # padding reads zeros
    if w is None:
        n = _size(op.inputs[1], range(1, len(op.inputs[1].type.shape)))
        bias = ins[2] if len(ins) > 2 and op.inputs[2] is not None else (0.0, 0.0)
        return [add(scale(mul(x, ins[1]), n), bias)]
    return [_linear(x, w, tuple(range(1, w.ndim)), b)]


@rule("ConvTranspose")
def _conv_transpose(op, ins, attrs):
    w = _const(op.inputs[1])
    if w is None:
        return [UNKNOWN]
    b = _const(op.inputs[2]) if len(op.inputs) > 2 else None
    # each output element sums a subset of (input channel, kernel position) products: bounded by
    # the sum over all of them for its channel within the group
    return [_linear(_with_zero(ins[0]), w, (0, *range(2, w.ndim)), b)]


@rule("MatMul")
def _matmul(op, ins, attrs):
    a, b = op.inputs
    if b.const_value is not None and b.const_value.ndim >= 2:
        return [_linear(ins[0], b.const_value, (b.const_value.ndim - 2,))]
    if a.const_value is not None and a.const_value.ndim >= 2:
        return [_linear(ins[1], a.const_value, (a.const_value.ndim - 1,))]
    k = a.type.shape[-1]
    if not isinstance(k, int):
        return [UNKNOWN]
    return [scale(mul(ins[0], ins[1]), k)]


@rule("Gemm")
def _gemm(op, ins, attrs):
    a, b = op.inputs[0], op.inputs[1]
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    c = scale(ins[2], beta) if len(ins) > 2 and op.inputs[2] is not None else (0.0, 0.0)
    if b.const_value is not None:
        w = b.const_value.T if attrs.get("transB", 0) else b.const_value
        bias = None
        if len(op.inputs) > 2 and op.inputs[2] is not None and op.inputs[2].const_value is not None:
            bias = np.asarray(op.inputs[2].const_value, np.float64) * beta
            c = (0.0, 0.0)
        got = _linear(ins[0], np.asarray(w, np.float64) * alpha, (0,), bias)
        return [add(got, c)]
    k = a.type.shape[0 if attrs.get("transA", 0) else 1]
    if not isinstance(k, int):
        return [UNKNOWN]
    return [add(scale(mul(ins[0], ins[1]), k * alpha), c)]


def _per_channel(x: Interval, s: np.ndarray, t: np.ndarray) -> Interval:
    """Bounds of s·x + t over channels (s, t per channel, broadcast)."""
    s, t = np.broadcast_arrays(np.asarray(s, np.float64).reshape(-1), np.asarray(t, np.float64).reshape(-1))
    lo, hi = x
    with np.errstate(invalid="ignore", over="ignore"):
        a, b = _times(s, lo) + t, _times(s, hi) + t
    ends = np.concatenate([a, b])
    if np.isnan(ends).any():
        return UNKNOWN
    return (float(ends.min()), float(ends.max()))


@rule("BatchNormalization")
def _batchnorm(op, ins, attrs):
    if attrs.get("training_mode", 0):
        return [UNKNOWN] * len(op.outputs)
    gamma, beta, mean, var = (_const(v) for v in op.inputs[1:5])
    if any(c is None for c in (gamma, beta, mean, var)):
        return [UNKNOWN]
    s = np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + attrs["epsilon"])
    return [_per_channel(ins[0], s, np.asarray(beta, np.float64) - s * np.asarray(mean, np.float64))]


def _normalized(op, ins, n: float, g_index: int = 1, b_index: int = 2) -> Interval:
    """Bounds of x̂·γ + β where |x̂| ≤ √n (γ, β paired element by element when both are constants
    of one size, as the op broadcasts them)."""
    r = math.sqrt(n)
    x = (-r, r)

    def given(i: int) -> bool:
        return len(op.inputs) > i and op.inputs[i] is not None

    gamma = op.inputs[g_index].const_value if given(g_index) else None
    beta = op.inputs[b_index].const_value if given(b_index) else None
    b = ins[b_index] if given(b_index) else (0.0, 0.0)
    if gamma is not None and beta is not None and np.size(gamma) == np.size(beta):
        return _per_channel(x, gamma, beta)
    if gamma is not None:
        return add(_per_channel(x, gamma, 0.0), b)
    return add(mul(x, ins[g_index] if given(g_index) else (1.0, 1.0)), b)


@rule("LayerNormalization")
def _layernorm(op, ins, attrs):
    x = op.inputs[0]
    axis = attrs.get("axis", -1) % len(x.type.shape)
    n = _size(x, range(axis, len(x.type.shape)))
    return [_normalized(op, ins, n - 1)]


@rule("RMSNormalization", "SimplifiedLayerNormalization")
def _rmsnorm(op, ins, attrs):
    x = op.inputs[0]
    axis = attrs.get("axis", -1) % len(x.type.shape)
    return [_normalized(op, ins, _size(x, range(axis, len(x.type.shape))))]


@rule("InstanceNormalization")
def _instancenorm(op, ins, attrs):
    x = op.inputs[0]
    return [_normalized(op, ins, _size(x, range(2, len(x.type.shape))) - 1)]


@rule("GroupNormalization")
def _groupnorm(op, ins, attrs):
    x = op.inputs[0]
    n = _size(x, range(1, len(x.type.shape))) / attrs["num_groups"]
    return [_normalized(op, ins, n - 1)]


@rule("LpNormalization")
def _lpnorm(op, ins, attrs):
    return [(-1.0, 1.0)]


@rule("Attention")
def _attention(op, ins, attrs):
    if len(op.inputs) > 4 and any(v is not None for v in op.inputs[4:]):  # a past key/value cache
        return [_union(ins[2], *(ins[i] for i in range(5, len(ins)) if op.inputs[i] is not None))]
    return [ins[2]]  # softmax rows sum to 1: a convex combination of V's rows


def _default_activations(attrs, expected: list[str]) -> bool:
    acts = attrs.get("activations")
    return not acts or all(a == e for a, e in zip(acts, expected * 2))


@rule("LSTM")
def _lstm(op, ins, attrs):
    if not _default_activations(attrs, ["Sigmoid", "Tanh", "Tanh"]) or attrs.get("clip"):
        return [UNKNOWN] * len(op.outputs)
    t = op.inputs[0].type.shape[1 if attrs.get("layout", 0) else 0]
    c0 = ins[6] if len(ins) > 6 and op.inputs[6] is not None else (0.0, 0.0)
    grow = float(t) if isinstance(t, int) else INF
    cell = (c0[0] - grow, c0[1] + grow)  # |c_t| ≤ |c_{t-1}| + 1: f, i in [0, 1], g in [-1, 1]
    return [(-1.0, 1.0), (-1.0, 1.0), cell]


@rule("GRU", "RNN")
def _gru(op, ins, attrs):
    expected = ["Sigmoid", "Tanh"] if op.op_type == "GRU" else ["Tanh"]
    if not _default_activations(attrs, expected) or attrs.get("clip"):
        return [UNKNOWN] * len(op.outputs)
    h0 = ins[5] if len(ins) > 5 and op.inputs[5] is not None else (0.0, 0.0)
    h = _union((-1.0, 1.0), h0)  # a convex mix of tanh and the previous state
    return [h, h]
