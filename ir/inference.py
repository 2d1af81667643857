"""Type and shape inference: one rule per operator, and the pass that fills in Value.type.

A rule is registered on the op's schema with ``@inference(...)`` and called as
``rule(op, attrs) -> [type or None per output]`` (``attrs`` with schema defaults filled).
Rules read input types from ``op.inputs[i].type`` and small input values (shape vectors,
axes, pads...) through :func:`value_of`, which sees constants and, during
:func:`infer_types`, the values the pass has folded (``Shape → Gather → Concat`` chains).

Inference is best effort: an unknown op, a missing input type or a malformed attribute
gives ``None`` (or an unknown dimension), never an exception.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Callable

import numpy as np

from offload.errors import OffloadError, ShapeError

from . import types as _types
from .core import Block, Operation, Program, Value
from .registry import inference, lookup
from .types import DataType, Dim, OptionalType, SequenceType, TensorType, ValueType

__all__ = ["FOLDABLE", "broadcast_shapes", "fold_op", "infer_op", "infer_types", "value_of"]

_log = logging.getLogger(__name__)

# Values folded by the running pass (Value → small ndarray); dims may be str (symbolic) or
# None (unknown) in object arrays that stand for partly known shapes.
_FOLDED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("offload_folded", default=None)
MAX_FOLDED_ELEMENTS = 64  # larger results are not worth tracking: shape vectors are short
MAX_READ_ELEMENTS = 4096  # a "shape" or "axes" input larger than this is a weight, not a shape
MAX_RANK = 64  # an inferred rank past this (the frontends' limit) is left unknown: no tensor has it

_SAME_UPPER_LOWER = ("SAME_UPPER", "SAME_LOWER")


# ---- reading inputs ----------------------------------------------------------------------


def _input(op: Operation, i: int) -> Value | None:
    return op.inputs[i] if i < len(op.inputs) else None


def _type(op: Operation, i: int) -> ValueType | None:
    v = _input(op, i)
    return None if v is None else v.type


def _tensor(op: Operation, i: int) -> TensorType | None:
    t = _type(op, i)
    return t if isinstance(t, TensorType) else None


def _dtype(op: Operation, i: int) -> DataType | None:
    t = _tensor(op, i)
    return None if t is None else t.dtype


def _shape(op: Operation, i: int) -> tuple[Dim, ...] | None:
    t = _tensor(op, i)
    return None if t is None else t.shape


def value_of(v: Value | None) -> np.ndarray | None:
    """The value of ``v`` when known before running: a constant or a value folded by the pass."""
    if v is None:
        return None
    if v.const_value is not None:
        return v.const_value
    folded = _FOLDED.get()
    return None if folded is None else folded.get(v)


def _dims_value(op: Operation, i: int) -> list | None:
    """Input ``i`` as a flat list of dims (int, symbol str or None), when its value is known."""
    a = value_of(_input(op, i))
    if a is None or a.dtype.kind not in "iubO" or a.size > MAX_READ_ELEMENTS:
        return None
    out = a.reshape(-1).tolist()
    if not all(d is None or isinstance(d, (int, str)) for d in out):
        return None
    return [int(d) if isinstance(d, int) else d for d in out]


def _ints_value(op: Operation, i: int) -> list[int] | None:
    """Input ``i`` as a flat list of ints, when every entry is a known integer."""
    dims = _dims_value(op, i)
    return dims if dims is not None and all(isinstance(d, int) for d in dims) else None


def _length(op: Operation, i: int) -> int | None:
    """The static length of 1-D input ``i`` (from its type), even when its values are unknown;
    None past MAX_RANK: the callers read it as a rank, and no tensor has a longer shape."""
    s = _shape(op, i)
    ok = s is not None and len(s) == 1 and isinstance(s[0], int) and s[0] <= MAX_RANK
    return s[0] if ok else None


def _unknown_dims(rank: int | None) -> tuple | None:
    return None if rank is None or rank < 0 else (None,) * rank


def _tt(dtype: DataType | None, shape) -> TensorType | None:
    """A tensor type, or None when the element type is unknown (no TensorType without one)."""
    if dtype is None:
        return None
    return TensorType(DataType(dtype), None if shape is None else tuple(shape))


def _axis(axis: int, rank: int) -> int | None:
    """A possibly negative axis as an index in [0, rank), or None when out of range."""
    a = axis + rank if axis < 0 else axis
    return a if 0 <= a < rank else None


def _attr_dtype(code, default: DataType | None) -> DataType | None:
    try:
        return DataType(int(code)) if code else default
    except (TypeError, ValueError):
        return default


# ---- dimension arithmetic ----------------------------------------------------------------


def _broadcast_dim(dims) -> Dim:
    """One output dim of numpy broadcasting: 1 yields, a known size wins, equal symbols stay."""
    big = {d for d in dims if d != 1}
    if not big:
        return 1
    sizes = {d for d in big if isinstance(d, int)}
    if sizes:
        # Any other operand must be 1 or this size in a valid model.
        return sizes.pop() if len(sizes) == 1 else None
    if None in big or len(big) > 1:
        return None
    return big.pop()


def broadcast_shapes(*shapes) -> tuple[Dim, ...] | None:
    """Multidirectional (numpy) broadcasting of shapes; None when any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(_broadcast_dim(ds) for ds in zip(*padded))


def _product(dims) -> Dim:
    """The product of dims: an int, a lone symbol (times ones), or None."""
    known = [d for d in dims if d != 1]
    if all(isinstance(d, int) for d in known):
        return math.prod(known)
    if len(known) == 1 and isinstance(known[0], str):
        return known[0]
    return None


def _merge_dim(a: Dim, b: Dim) -> Dim:
    """Two facts about one dim: a known size beats a symbol, a symbol beats nothing."""
    if isinstance(a, int) or b is None:
        return a
    if isinstance(b, int) or a is None:
        return b
    return a if a == b else None


def _join_types(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    """What is true of a value of either type (If branches, loop-carried values)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType) and a.dtype == b.dtype:
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(a.dtype, None)
        return TensorType(a.dtype, tuple(x if x == y else None for x, y in zip(a.shape, b.shape)))
    if type(a) is type(b) and isinstance(a, (SequenceType, OptionalType)):
        elem = _join_types(a.elem, b.elem)
        return None if elem is None else type(a)(elem)
    return None


# ---- elementwise ops -----------------------------------------------------------------------

# One output with exactly the type of the first input (extra inputs do not change it).
SAME_AS_INPUT = [
    "Abs",
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "CumProd",
    "CumSum",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "Identity",
    "InstanceNormalization",
    "LRN",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LpNormalization",
    "MeanVarianceNormalization",
    "Mish",
    "Neg",
    "Not",
    "BitwiseNot",
    "RMSNormalization",
    "Reciprocal",
    "Relu",
    "ReverseSequence",
    "RotaryEmbedding",
    "Round",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Swish",
    "Tan",
    "Tanh",
    "TensorScatter",
    "ThresholdedRelu",
    "Trilu",
    "SwiGLU",
]
# Elementwise over broadcast inputs, keeping the first input's element type.
BROADCAST_SAME = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "PRelu",
    "Max",
    "Min",
    "Mean",
    "Sum",
    "And",
    "Or",
    "Xor",
    "StringConcat",
]
# Elementwise over broadcast inputs, producing bool.
BROADCAST_BOOL = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]
# Same shape as the input, bool elements.
BOOL_SAME_SHAPE = ["IsNaN", "IsInf", "RegexFullMatch"]


@inference(*SAME_AS_INPUT)
def _same_as_input(op, attrs):
    return [_type(op, 0)]


@inference(*BROADCAST_SAME)
def _broadcast_same(op, attrs):
    shapes = [_shape(op, i) for i in range(len(op.inputs))]
    return [_tt(_dtype(op, 0), broadcast_shapes(*shapes))]


@inference(*BROADCAST_BOOL)
def _broadcast_bool(op, attrs):
    if _tensor(op, 0) is None or _tensor(op, 1) is None:
        return [None]
    return [_tt(DataType.BOOL, broadcast_shapes(_shape(op, 0), _shape(op, 1)))]


@inference(*BOOL_SAME_SHAPE)
def _bool_same_shape(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else TensorType(DataType.BOOL, t.shape)]


@inference("Where")
def _where(op, attrs):
    shapes = [_shape(op, i) for i in range(3)]
    return [_tt(_dtype(op, 1) or _dtype(op, 2), broadcast_shapes(*shapes))]


@inference("Cast")
def _cast(op, attrs):
    t = _tensor(op, 0)
    to = _attr_dtype(attrs.get("to"), None)
    return [None if t is None or to is None else TensorType(to, t.shape)]


@inference("BitCast")
def _bitcast(op, attrs):
    return _cast(op, attrs)


@inference("CastLike")
def _cast_like(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else _tt(_dtype(op, 1), t.shape)]


@inference("Dropout")
def _dropout(op, attrs):
    t = _tensor(op, 0)
    return [t, None if t is None else TensorType(DataType.BOOL, t.shape)]


@inference("BatchNormalization")
def _batch_norm(op, attrs):
    return [_type(op, 0), _type(op, 3), _type(op, 4)]


@inference("LayerNormalization")
def _layer_norm(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    stats = None
    if t.shape is not None:
        axis = _axis(attrs.get("axis", -1), len(t.shape))
        if axis is not None:
            stats = t.shape[:axis] + (1,) * (len(t.shape) - axis)
    stash = _attr_dtype(attrs.get("stash_type"), DataType.FLOAT)
    return [t, _tt(stash, stats), _tt(stash, stats)]


@inference("RandomNormalLike", "RandomUniformLike", "Bernoulli", "EyeLike")
def _like(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else TensorType(_attr_dtype(attrs.get("dtype"), t.dtype), t.shape)]


@inference("RandomNormal", "RandomUniform")
def _random(op, attrs):
    shape = attrs.get("shape")
    return [_tt(_attr_dtype(attrs.get("dtype"), DataType.FLOAT), None if shape is None else list(shape))]


@inference("Multinomial")
def _multinomial(op, attrs):
    s = _shape(op, 0)
    shape = None if s is None else (s[0], attrs.get("sample_size", 1))
    return [_tt(_attr_dtype(attrs.get("dtype"), DataType.INT32), shape)]


# ---- linear algebra ------------------------------------------------------------------------


def _matmul_shape(a, b) -> tuple[Dim, ...] | None:
    """numpy.matmul's result shape: 1-D operands gain, then lose, a unit dim."""
    if a is None or b is None or len(a) == 0 or len(b) == 0:
        return None
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@inference("MatMul")
def _matmul(op, attrs):
    return [_tt(_dtype(op, 0), _matmul_shape(_shape(op, 0), _shape(op, 1)))]


@inference("MatMulInteger")
def _matmul_integer(op, attrs):
    return [_tt(DataType.INT32, _matmul_shape(_shape(op, 0), _shape(op, 1)))]


@inference("QLinearMatMul")
def _qlinear_matmul(op, attrs):
    return [_tt(_dtype(op, 7), _matmul_shape(_shape(op, 0), _shape(op, 3)))]


@inference("Gemm")
def _gemm(op, attrs):
    a, b = _shape(op, 0), _shape(op, 1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [_tt(_dtype(op, 0), None)]
    m = a[1] if attrs.get("transA") else a[0]
    n = b[0] if attrs.get("transB") else b[1]
    return [_tt(_dtype(op, 0), (m, n))]


@inference("Einsum")
def _einsum(op, attrs):
    dtype = _dtype(op, 0)
    try:
        return [_tt(dtype, _einsum_shape(attrs["equation"], [_shape(op, i) for i in range(len(op.inputs))]))]
    except (KeyError, ValueError, TypeError, AttributeError):
        return [_tt(dtype, None)]


def _einsum_terms(term: str) -> list[str]:
    """'b...ij' → ['b', '...', 'i', 'j']."""
    head, ell, tail = term.partition("...")
    return list(head) + (["..."] if ell else []) + list(tail)


def _einsum_shape(equation: str, shapes) -> tuple[Dim, ...] | None:
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = [_einsum_terms(t) for t in lhs.split(",")]
    if len(terms) != len(shapes) or any(s is None for s in shapes):
        return None
    sizes: dict[str, Dim] = {}
    ellipses = []
    for labels, shape in zip(terms, shapes):
        n_ell = len(shape) - (len(labels) - labels.count("..."))
        pos = 0
        for label in labels:
            if label == "...":
                ellipses.append(shape[pos : pos + n_ell])
                pos += n_ell
            else:
                sizes[label] = _merge_dim(sizes.get(label), shape[pos]) if label in sizes else shape[pos]
                pos += 1
    ell = broadcast_shapes(*ellipses) if ellipses else ()
    if not arrow:  # implicit output: the ellipsis, then labels seen once, alphabetically
        counts = [x for t in terms for x in t if x != "..."]
        rhs = ("..." if ellipses else "") + "".join(sorted(x for x in set(counts) if counts.count(x) == 1))
    out: list[Dim] = []
    for label in _einsum_terms(rhs):
        out.extend(ell if label == "..." else [sizes[label]])
    return tuple(out)


# ---- convolution and pooling ---------------------------------------------------------------


def _window_out(
    size: Dim,
    kernel: Dim,
    stride: int,
    pad_sum: int,
    pad_begin: int,
    dilation: int,
    auto_pad: str,
    ceil_mode: bool,
) -> Dim:
    """One spatial output dim of a sliding window (Conv, pools)."""
    if not isinstance(size, int) or not isinstance(kernel, int):
        return None
    if auto_pad in _SAME_UPPER_LOWER:
        return -(-size // stride)
    if auto_pad == "VALID":
        pad_sum = pad_begin = 0
    span = size + pad_sum - dilation * (kernel - 1) - 1
    if span < 0:
        return None
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    # A ceil-mode window must start inside the input or its left padding.
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _spatial(in_dims, kernel, attrs, ceil_mode=False) -> list[Dim]:
    n = len(in_dims)
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    return [
        _window_out(
            in_dims[i],
            kernel[i],
            strides[i],
            pads[i] + pads[i + n],
            pads[i],
            dilations[i],
            auto_pad,
            ceil_mode,
        )
        for i in range(n)
    ]


def _conv_shape(x, w, attrs) -> tuple[Dim, ...] | None:
    if x is None or len(x) < 2:
        return None
    spatial = x[2:]
    kernel = attrs.get("kernel_shape") or (list(w[2:]) if w is not None else None)
    if kernel is None or len(kernel) != len(spatial):
        return (x[0], None if w is None else w[0]) + (None,) * len(spatial)
    return (x[0], None if w is None else w[0], *_spatial(spatial, kernel, attrs))


@inference("Conv", "DeformConv")
def _conv(op, attrs):
    return [_tt(_dtype(op, 0), _conv_shape(_shape(op, 0), _shape(op, 1), attrs))]


@inference("ConvInteger")
def _conv_integer(op, attrs):
    return [_tt(DataType.INT32, _conv_shape(_shape(op, 0), _shape(op, 1), attrs))]


@inference("QLinearConv")
def _qlinear_conv(op, attrs):
    return [_tt(_dtype(op, 7), _conv_shape(_shape(op, 0), _shape(op, 3), attrs))]


@inference("ConvTranspose")
def _conv_transpose(op, attrs):
    x, w = _shape(op, 0), _shape(op, 1)
    dtype = _dtype(op, 0)
    if x is None or len(x) < 2:
        return [_tt(dtype, None)]
    n = len(x) - 2
    channels = w[1] * attrs.get("group", 1) if w is not None and isinstance(w[1], int) else None
    explicit = attrs.get("output_shape")
    if explicit:
        return [_tt(dtype, (x[0], channels, *list(explicit)[-n:]))]
    kernel = attrs.get("kernel_shape") or (list(w[2:]) if w is not None else [None] * n)
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    extra = attrs.get("output_padding") or [0] * n
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    out = []
    for i in range(n):
        d, k = x[2 + i], kernel[i]
        if not isinstance(d, int) or not isinstance(k, int):
            out.append(None)
        elif auto_pad in _SAME_UPPER_LOWER:
            out.append(d * strides[i])
        else:
            pad = 0 if auto_pad == "VALID" else pads[i] + pads[i + n]
            out.append(strides[i] * (d - 1) + extra[i] + (k - 1) * dilations[i] + 1 - pad)
    return [_tt(dtype, (x[0], channels, *out))]


def _pool_shape(op, attrs) -> tuple[Dim, ...] | None:
    x = _shape(op, 0)
    kernel = attrs.get("kernel_shape")
    if x is None or len(x) < 2 or not kernel or len(kernel) != len(x) - 2:
        return None
    return (x[0], x[1], *_spatial(x[2:], kernel, attrs, bool(attrs.get("ceil_mode"))))


@inference("AveragePool", "LpPool")
def _pool(op, attrs):
    return [_tt(_dtype(op, 0), _pool_shape(op, attrs))]


@inference("MaxPool")
def _max_pool(op, attrs):
    shape = _pool_shape(op, attrs)
    return [_tt(_dtype(op, 0), shape), _tt(DataType.INT64, shape)]


@inference("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(op, attrs):
    x = _shape(op, 0)
    shape = None if x is None or len(x) < 2 else (x[0], x[1]) + (1,) * (len(x) - 2)
    return [_tt(_dtype(op, 0), shape)]


@inference("MaxUnpool")
def _max_unpool(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    explicit = _ints_value(op, 2)
    if explicit is not None:
        return [_tt(dtype, explicit)]
    kernel = attrs.get("kernel_shape")
    if x is None or len(x) < 2 or _input(op, 2) is not None or not kernel:
        return [_tt(dtype, None if x is None else (None,) * len(x))]
    n = len(x) - 2
    strides = attrs.get("strides") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    spatial = [
        (d - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n] if isinstance(d, int) else None
        for i, d in enumerate(x[2:])
    ]
    return [_tt(dtype, (x[0], x[1], *spatial))]


@inference("MaxRoiPool")
def _max_roi_pool(op, attrs):
    x, rois = _shape(op, 0), _shape(op, 1)
    pooled = list(attrs.get("pooled_shape") or [])
    if x is None or rois is None or len(x) < 2 or not rois:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (rois[0], x[1], *pooled))]


@inference("RoiAlign")
def _roi_align(op, attrs):
    x, rois = _shape(op, 0), _shape(op, 1)
    if x is None or rois is None or len(x) < 2 or not rois:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (rois[0], x[1], attrs.get("output_height", 1), attrs.get("output_width", 1)))]


@inference("GridSample")
def _grid_sample(op, attrs):
    x, grid = _shape(op, 0), _shape(op, 1)
    if x is None or grid is None or len(x) < 2 or len(grid) < 2:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (_merge_dim(x[0], grid[0]), x[1], *grid[1:-1]))]


@inference("AffineGrid")
def _affine_grid(op, attrs):
    size = _dims_value(op, 1)
    if size is None or len(size) < 3:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (size[0], *size[2:], len(size) - 2))]


@inference("DepthToSpace", "SpaceToDepth")
def _depth_space(op, attrs):
    x, b = _shape(op, 0), attrs.get("blocksize")
    if x is None or len(x) != 4 or not isinstance(b, int) or b <= 0:
        return [_tt(_dtype(op, 0), None if x is None else (None,) * len(x))]

    n, c, h, w = x
    if op.op_type == "DepthToSpace":
        shape = (n, _exact_div(c, b * b), _mul(h, b), _mul(w, b))
    else:
        shape = (n, _mul(c, b * b), _exact_div(h, b), _exact_div(w, b))
    return [_tt(_dtype(op, 0), shape)]


def _mul(d: Dim, k: int) -> Dim:
    return d * k if isinstance(d, int) else (d if k == 1 else None)


def _exact_div(d: Dim, k: int) -> Dim:
    return d // k if isinstance(d, int) and d % k == 0 else (d if k == 1 else None)


# ---- recurrent -----------------------------------------------------------------------------


@inference("RNN", "GRU", "LSTM")
def _recurrent(op, attrs):
    x, r, dtype = _shape(op, 0), _shape(op, 2), _dtype(op, 0)
    hidden = attrs.get("hidden_size") or (r[-1] if r else None)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    if x is None or len(x) != 3:
        return [_tt(dtype, None)] * len(op.outputs)
    if attrs.get("layout"):
        batch, seq = x[0], x[1]
        y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
    else:
        seq, batch = x[0], x[1]
        y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
    return [_tt(dtype, y)] + [_tt(dtype, state)] * (len(op.outputs) - 1)


@inference("Attention")
def _attention(op, attrs):
    q, k, v, dtype = _shape(op, 0), _shape(op, 1), _shape(op, 2), _dtype(op, 0)
    if q is None or k is None or v is None or len(q) != len(k) or len(q) not in (3, 4):
        return [_tt(dtype, None)]
    past = _shape(op, 4)
    if len(q) == 4:
        batch, q_heads, seq, kv_heads = q[0], q[1], q[2], k[1]
        head, v_head, kv_seq = k[3], v[3], k[2]
        y = (batch, q_heads, seq, v_head)
    else:
        q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not q_heads or not kv_heads:
            return [_tt(dtype, None)]
        batch, seq, kv_seq = q[0], q[1], k[1]
        head = k[2] // kv_heads if isinstance(k[2], int) else None
        v_head = v[2] // kv_heads if isinstance(v[2], int) else None
        y = (batch, seq, q_heads * v_head if v_head is not None else None)
    total = kv_seq
    if past is not None and len(past) == 4:
        total = past[2] + kv_seq if isinstance(past[2], int) and isinstance(kv_seq, int) else None
    return [
        _tt(dtype, y),
        _tt(_dtype(op, 1), (batch, kv_heads, total, head)),
        _tt(_dtype(op, 2), (batch, kv_heads, total, v_head)),
        _tt(dtype, (batch, q_heads, seq, total)),
    ]


# ---- reductions ----------------------------------------------------------------------------

REDUCE = [
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
]


def _reduced(shape, axes: list[int] | None, keepdims: bool) -> tuple[Dim, ...] | None:
    """``shape`` reduced over ``axes`` (None: every axis)."""
    if shape is None:
        return None
    rank = len(shape)
    chosen = set(range(rank)) if axes is None else {_axis(a, rank) for a in axes}
    if None in chosen:
        return None
    if keepdims:
        return tuple(1 if i in chosen else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in chosen)


@inference(*REDUCE)
def _reduce(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    keep = bool(attrs.get("keepdims", 1))
    if _input(op, 1) is None:
        axes = None
    else:
        axes = _ints_value(op, 1)
        n = _length(op, 1)
        if axes is None and t.shape is not None and (keep or n):  # unknown axes, known rank
            return [TensorType(t.dtype, _unknown_dims(len(t.shape) - (0 if keep else n)))]
        if axes is None:
            return [TensorType(t.dtype, None)]
    if axes is not None and not axes:
        axes = None
    if axes is None and attrs.get("noop_with_empty_axes"):
        return [t]
    return [TensorType(t.dtype, _reduced(t.shape, axes, keep))]


@inference("ArgMax", "ArgMin")
def _arg_reduce(op, attrs):
    s = _shape(op, 0)
    if _tensor(op, 0) is None:
        return [None]
    return [_tt(DataType.INT64, _reduced(s, [attrs.get("axis", 0)], bool(attrs.get("keepdims", 1))))]


@inference("TopK")
def _topk(op, attrs):
    s, dtype = _shape(op, 0), _dtype(op, 0)
    k = _ints_value(op, 1)
    shape = None
    if s is not None:
        axis = _axis(attrs.get("axis", -1), len(s))
        if axis is not None:
            shape = s[:axis] + (k[0] if k and len(k) == 1 else None,) + s[axis + 1 :]
    return [_tt(dtype, shape), _tt(DataType.INT64, shape)]


@inference("Det")
def _det(op, attrs):
    s = _shape(op, 0)
    return [_tt(_dtype(op, 0), None if s is None or len(s) < 2 else s[:-2])]


@inference("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(op, attrs):
    dtype, target = _dtype(op, 0), _shape(op, 1)
    shape = target if attrs.get("reduction", "mean") == "none" else ()
    return [_tt(dtype, shape), _tt(dtype, _shape(op, 0))][: len(op.outputs)]


# ---- shape manipulation --------------------------------------------------------------------


def _reshape_dims(shape, target: list, allowzero: bool) -> tuple[Dim, ...]:
    """The output shape of Reshape; 0 copies (unless allowzero) and one -1 takes the rest."""
    out: list = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            d = shape[i] if shape is not None and i < len(shape) else None
        out.append(d)
    if -1 in out:
        out[out.index(-1)] = _rest_dim(shape, [d for d in out if d != -1])
    return tuple(out)


def _rest_dim(shape, others: list) -> Dim:
    """What a -1 must be so that ``others`` and it hold as many elements as ``shape``."""
    if shape is None or None in shape or None in others:
        return None
    total = [d for d in shape if d != 1]
    rest = [d for d in others if d != 1]
    for sym in [d for d in rest if isinstance(d, str)]:  # equal symbols on both sides cancel
        if sym not in total:
            return None
        total.remove(sym)
        rest.remove(sym)
    known = math.prod(rest)
    left_syms = [d for d in total if isinstance(d, str)]
    left = math.prod(d for d in total if isinstance(d, int))
    if not left_syms:
        return left // known if known and left % known == 0 else None
    return left_syms[0] if len(left_syms) == 1 and left == known else None


@inference("Reshape")
def _reshape(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    target = _dims_value(op, 1)
    if target is None:
        return [TensorType(t.dtype, _unknown_dims(_length(op, 1)))]
    return [TensorType(t.dtype, _reshape_dims(t.shape, target, bool(attrs.get("allowzero"))))]


@inference("Flatten")
def _flatten(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [None if t is None else TensorType(t.dtype, (None, None))]
    axis = attrs.get("axis", 1)
    axis = axis + len(t.shape) if axis < 0 else axis
    return [TensorType(t.dtype, (_product(t.shape[:axis]), _product(t.shape[axis:])))]


@inference("Squeeze")
def _squeeze(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    if _input(op, 1) is None:
        if not all(isinstance(d, int) for d in t.shape):
            return [TensorType(t.dtype, None)]  # which symbolic dims are 1 is unknown
        return [TensorType(t.dtype, tuple(d for d in t.shape if d != 1))]
    axes = _ints_value(op, 1)
    if axes is None:
        n = _length(op, 1)
        return [TensorType(t.dtype, None if n is None else _unknown_dims(len(t.shape) - n))]
    drop = {_axis(a, len(t.shape)) for a in axes}
    return [TensorType(t.dtype, tuple(d for i, d in enumerate(t.shape) if i not in drop))]


@inference("Unsqueeze")
def _unsqueeze(op, attrs):
    t = _tensor(op, 0)
    axes = _ints_value(op, 1)
    if t is None or t.shape is None:
        return [t]
    if axes is None:
        n = _length(op, 1)
        return [TensorType(t.dtype, None if n is None else _unknown_dims(len(t.shape) + n))]
    rank = len(t.shape) + len(axes)
    ones = {_axis(a, rank) for a in axes}
    rest = iter(t.shape)
    return [TensorType(t.dtype, tuple(1 if i in ones else next(rest) for i in range(rank)))]


@inference("Transpose")
def _transpose(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    perm = attrs.get("perm") or list(range(len(t.shape)))[::-1]
    return [TensorType(t.dtype, tuple(t.shape[p] for p in perm))]


@inference("Concat")
def _concat(op, attrs):
    types = [_tensor(op, i) for i in range(len(op.inputs))]
    dtype = next((t.dtype for t in types if t is not None), None)
    shapes = [None if t is None else t.shape for t in types]
    ranked = [s for s in shapes if s is not None]
    if not ranked:
        return [_tt(dtype, None)]
    rank = len(ranked[0])
    axis = _axis(attrs.get("axis", 0), rank)
    if axis is None or any(len(s) != rank for s in ranked):
        return [_tt(dtype, None)]
    out = []
    for i in range(rank):
        if i == axis:
            sizes = [None if s is None else s[i] for s in shapes]
            out.append(sum(sizes) if all(isinstance(d, int) for d in sizes) else None)
        else:
            dim = ranked[0][i]
            for s in ranked[1:]:
                dim = _merge_dim(dim, s[i])
            out.append(dim)
    return [_tt(dtype, out)]


@inference("Split")
def _split(op, attrs):
    t = _tensor(op, 0)
    n = len(op.outputs)
    if t is None or t.shape is None:
        return [t] * n
    axis = _axis(attrs.get("axis", 0), len(t.shape))
    if axis is None:
        return [TensorType(t.dtype, None)] * n
    return [
        TensorType(t.dtype, t.shape[:axis] + (d,) + t.shape[axis + 1 :])
        for d in _split_sizes(op, t.shape[axis], n)
    ]


def _split_sizes(op, dim: Dim, n: int) -> list[Dim]:
    """Sizes of the pieces: the ``split`` input, or ``n`` near-equal pieces (the last smaller)."""
    if _input(op, 1) is not None:
        sizes = _ints_value(op, 1)
        return sizes if sizes is not None and len(sizes) == n else [None] * n
    if not isinstance(dim, int):
        return [None] * n
    each = -(-dim // n)
    return [each] * (n - 1) + [dim - each * (n - 1)]


def _slice_len(dim: Dim, start: int, end: int, step: int) -> Dim:
    # ONNX clamps starts and ends exactly as Python slices do.
    if not isinstance(dim, int) or step == 0:
        return None
    return len(range(*slice(start, end, step).indices(dim)))


@inference("Slice")
def _slice(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    starts, ends = _ints_value(op, 1), _ints_value(op, 2)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(len(starts or [])))
    steps = _ints_value(op, 4) if _input(op, 4) is not None else [1] * len(starts or [])
    if starts is None or ends is None or axes is None or steps is None:
        if axes is not None and _input(op, 3) is not None:  # only the sliced axes are unknown
            sliced = {_axis(a, rank) for a in axes}
            return [TensorType(t.dtype, tuple(None if i in sliced else d for i, d in enumerate(t.shape)))]
        return [TensorType(t.dtype, (None,) * rank)]
    out = list(t.shape)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = _axis(axis, rank)
        if a is None:
            return [TensorType(t.dtype, (None,) * rank)]
        out[a] = _slice_len(t.shape[a], start, end, step)
    return [TensorType(t.dtype, tuple(out))]


@inference("Gather")
def _gather(op, attrs):
    data, idx, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    if data is None or idx is None:
        return [_tt(dtype, None)]
    axis = _axis(attrs.get("axis", 0), len(data))
    if axis is None:
        return [_tt(dtype, None)]
    return [_tt(dtype, data[:axis] + tuple(idx) + data[axis + 1 :])]


@inference("GatherElements")
def _gather_elements(op, attrs):
    return [_tt(_dtype(op, 0), _shape(op, 1))]


@inference("GatherND")
def _gather_nd(op, attrs):
    data, idx, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    b = attrs.get("batch_dims", 0)
    if data is None or idx is None or not idx or not isinstance(idx[-1], int):
        return [_tt(dtype, None)]
    return [_tt(dtype, tuple(idx[:-1]) + tuple(data[b + idx[-1] :]))]


@inference("Expand")
def _expand(op, attrs):
    t = _tensor(op, 0)
    if t is None:
        return [None]
    target = _dims_value(op, 1)
    if target is None:
        n = _length(op, 1)
        if n is None:
            return [TensorType(t.dtype, None)]
        target = [None] * n
    return [TensorType(t.dtype, broadcast_shapes(t.shape, tuple(target)))]


@inference("Tile")
def _tile(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    reps = _ints_value(op, 1)
    if reps is None or len(reps) != len(t.shape):
        return [TensorType(t.dtype, (None,) * len(t.shape))]
    return [
        TensorType(
            t.dtype,
            tuple(d * r if isinstance(d, int) else (d if r == 1 else None) for d, r in zip(t.shape, reps)),
        )
    ]


@inference("Pad")
def _pad(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    pads = _ints_value(op, 1)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(rank))
    if pads is None or axes is None or len(pads) != 2 * len(axes):
        return [TensorType(t.dtype, (None,) * rank)]
    out = list(t.shape)
    for j, axis in enumerate(axes):
        a = _axis(axis, rank)
        if a is None:
            return [TensorType(t.dtype, (None,) * rank)]
        grow = pads[j] + pads[j + len(axes)]
        out[a] = out[a] + grow if isinstance(out[a], int) else (out[a] if grow == 0 else None)
    return [TensorType(t.dtype, tuple(out))]


@inference("CenterCropPad")
def _center_crop_pad(op, attrs):
    t = _tensor(op, 0)
    target = _dims_value(op, 1)
    if t is None or t.shape is None or target is None:
        return [None if t is None else TensorType(t.dtype, None)]
    axes = attrs.get("axes") or list(range(len(t.shape)))
    out = list(t.shape)
    for a, d in zip(axes, target):
        if _axis(a, len(out)) is not None:
            out[_axis(a, len(out))] = d
    return [TensorType(t.dtype, tuple(out))]


def _shape_range(rank: int, attrs) -> tuple[int, int]:
    """Shape's [start, end) after clamping negatives and overruns to [0, rank]."""

    def clamp(x):
        x = x + rank if x < 0 else x
        return min(max(x, 0), rank)

    end = attrs.get("end")
    return clamp(attrs.get("start") or 0), clamp(rank if end is None else end)


@inference("Shape")
def _shape_op(op, attrs):
    s = _shape(op, 0)
    if _type(op, 0) is None or s is None:
        return [_tt(DataType.INT64, (None,))]
    start, end = _shape_range(len(s), attrs)
    return [TensorType(DataType.INT64, (max(end - start, 0),))]


@inference("Size")
def _size(op, attrs):
    return [TensorType(DataType.INT64, ())]


@inference("ConstantOfShape")
def _constant_of_shape(op, attrs):
    value = attrs.get("value")
    dtype = DataType.from_numpy(value.dtype) if isinstance(value, np.ndarray) else DataType.FLOAT
    dims = _dims_value(op, 0)
    if dims is None:
        dims = _unknown_dims(_length(op, 0))
    return [_tt(dtype, dims)]


@inference("Constant")
def _constant(op, attrs):
    for key in ("value", "sparse_value"):
        if isinstance(attrs.get(key), np.ndarray):
            a = attrs[key]
            return [TensorType(DataType.from_numpy(a.dtype), a.shape)]
    scalar = {
        "value_float": (DataType.FLOAT, ()),
        "value_int": (DataType.INT64, ()),
        "value_string": (DataType.STRING, ()),
    }
    for key, (dtype, shape) in scalar.items():
        if attrs.get(key) is not None:
            return [TensorType(dtype, shape)]
    vector = {"value_floats": DataType.FLOAT, "value_ints": DataType.INT64, "value_strings": DataType.STRING}
    for key, dtype in vector.items():
        if attrs.get(key) is not None:
            return [TensorType(dtype, (len(attrs[key]),))]
    return [None]


@inference("Range")
def _range(op, attrs):
    dtype = _dtype(op, 0)
    vals = [value_of(_input(op, i)) for i in range(3)]
    if any(v is None or v.size != 1 for v in vals):
        return [_tt(dtype, (None,))]
    start, limit, delta = (v.reshape(-1)[0].item() for v in vals)
    if delta == 0:
        return [_tt(dtype, (None,))]
    return [_tt(dtype, (max(math.ceil((limit - start) / delta), 0),))]


@inference("BlackmanWindow", "HammingWindow", "HannWindow")
def _window(op, attrs):
    size = _ints_value(op, 0)
    dtype = _attr_dtype(attrs.get("output_datatype"), DataType.FLOAT)
    return [_tt(dtype, (size[0] if size and len(size) == 1 else None,))]


@inference("Resize")
def _resize(op, attrs):
    t = _tensor(op, 0)
    if t is None or t.shape is None:
        return [t]
    rank = len(t.shape)
    axes = [_axis(a, rank) for a in (attrs.get("axes") or range(rank))]
    out = list(t.shape)
    sizes = _ints_value(op, 3) if _input(op, 3) is not None else None
    scales = value_of(_input(op, 2)) if _input(op, 2) is not None else None
    if sizes is not None and len(sizes) == len(axes):
        out = _resize_to_sizes(out, axes, sizes, attrs.get("keep_aspect_ratio_policy", "stretch"))
    elif scales is not None and scales.size == len(axes):
        for a, s in zip(axes, scales.reshape(-1).tolist()):
            out[a] = math.floor(out[a] * s) if isinstance(out[a], int) else None
    else:
        out = [None] * rank
    return [TensorType(t.dtype, tuple(out))]


def _resize_to_sizes(out: list, axes: list, sizes: list[int], policy: str) -> list:
    if policy == "stretch":
        for a, s in zip(axes, sizes):
            out[a] = s
        return out
    if not all(isinstance(out[a], int) and out[a] > 0 for a in axes):
        return [None if a in axes else d for a, d in enumerate(out)]
    ratios = [s / out[a] for a, s in zip(axes, sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        out[a] = math.floor(out[a] * scale + 0.5)
    return out


@inference("OneHot")
def _one_hot(op, attrs):
    idx, dtype = _shape(op, 0), _dtype(op, 2)
    depth = value_of(_input(op, 1))
    if idx is None:
        return [_tt(dtype, None)]
    rank = len(idx) + 1
    axis = _axis(attrs.get("axis", -1), rank)
    d = int(depth.reshape(-1)[0]) if depth is not None and depth.size == 1 else None
    if axis is None:
        return [_tt(dtype, None)]
    return [_tt(dtype, tuple(idx[:axis]) + (d,) + tuple(idx[axis:]))]


@inference("NonZero")
def _nonzero(op, attrs):
    s = _shape(op, 0)
    return [_tt(DataType.INT64, (None if s is None else len(s), None))]


@inference("Compress")
def _compress(op, attrs):
    s, axis = _shape(op, 0), attrs.get("axis")
    if axis is None or s is None:
        return [_tt(_dtype(op, 0), (None,) if axis is None else None)]
    a = _axis(axis, len(s))
    return [_tt(_dtype(op, 0), None if a is None else s[:a] + (None,) + s[a + 1 :])]


@inference("Unique")
def _unique(op, attrs):
    s, axis, dtype = _shape(op, 0), attrs.get("axis"), _dtype(op, 0)
    if axis is None or s is None:
        y = (None,) if axis is None else None
    else:
        a = _axis(axis, len(s))
        y = None if a is None else s[:a] + (None,) + s[a + 1 :]
    return [_tt(dtype, y)] + [_tt(DataType.INT64, (None,))] * 3


@inference("NonMaxSuppression")
def _nms(op, attrs):
    return [TensorType(DataType.INT64, (None, 3))]


@inference("StringSplit")
def _string_split(op, attrs):
    s = _shape(op, 0)
    return [_tt(DataType.STRING, None if s is None else s + (None,)), _tt(DataType.INT64, s)]


# ---- signal, text and fused ops ---------------------------------------------------------


@inference("Col2Im")
def _col2im(op, attrs):
    x, image, block = _shape(op, 0), _dims_value(op, 1), _ints_value(op, 2)
    if x is None or len(x) != 3 or image is None:
        return [_tt(_dtype(op, 0), None)]
    channels = _exact_div(x[1], math.prod(block)) if block else None
    return [_tt(_dtype(op, 0), (x[0], channels, *image))]


@inference("DFT")
def _dft(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    if x is None or len(x) < 2:
        return [_tt(dtype, None)]
    onesided, inverse = bool(attrs.get("onesided")), bool(attrs.get("inverse"))
    last = 1 if onesided and inverse else 2  # an inverse one-sided DFT gives a real signal
    axis = _dft_axis(op, len(x))
    if axis is None:
        return [_tt(dtype, (None,) * (len(x) - 1) + (last,))]
    n = x[axis]
    if _input(op, 1) is not None:
        length = _ints_value(op, 1)
        n = length[0] if length and len(length) == 1 else None
    elif onesided and inverse:
        n = 2 * (n - 1) if isinstance(n, int) else None
    if onesided and not inverse:
        n = n // 2 + 1 if isinstance(n, int) else None
    return [_tt(dtype, (*x[:axis], n, *x[axis + 1 : -1], last))]


def _dft_axis(op, rank: int) -> int | None:
    # DFT before opset 20 took the axis as an attribute; the importer may keep that form.
    if "axis" in op.attributes:
        value = [op.attributes["axis"]]
    else:
        value = _ints_value(op, 2) if _input(op, 2) is not None else [-2]
    axis = _axis(value[0], rank) if value and len(value) == 1 else None
    return None if axis == rank - 1 else axis


@inference("STFT")
def _stft(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    if x is None or len(x) != 3:
        return [_tt(dtype, None)]
    step = _ints_value(op, 1)
    length = _ints_value(op, 3) if _input(op, 3) is not None else None
    window = _shape(op, 2) if _input(op, 2) is not None else None
    if _input(op, 3) is not None:
        frame = length[0] if length else None
    else:
        frame = window[0] if window else x[1]
    frames = bins = None
    if isinstance(frame, int) and isinstance(x[1], int) and step and step[0] > 0:
        frames = (x[1] - frame) // step[0] + 1
    if isinstance(frame, int):
        bins = frame // 2 + 1 if attrs.get("onesided", 1) else frame
    return [_tt(dtype, (x[0], frames, bins, 2))]


@inference("MelWeightMatrix")
def _mel_weight_matrix(op, attrs):
    bins, length = _ints_value(op, 0), _ints_value(op, 1)
    rows = length[0] // 2 + 1 if length and len(length) == 1 else None
    cols = bins[0] if bins and len(bins) == 1 else None
    return [_tt(_attr_dtype(attrs.get("output_datatype"), DataType.FLOAT), (rows, cols))]


@inference("TfIdfVectorizer")
def _tfidf(op, attrs):
    x = _shape(op, 0)
    indexes = attrs.get("ngram_indexes") or []
    width = max(indexes) + 1 if indexes else None
    if x is None or len(x) not in (1, 2):
        return [_tt(DataType.FLOAT, None)]
    return [_tt(DataType.FLOAT, (width,) if len(x) == 1 else (x[0], width))]


@inference("StringNormalizer")
def _string_normalizer(op, attrs):
    x = _shape(op, 0)
    if x is None or attrs.get("stopwords"):  # stopwords remove an unknown number of strings
        return [_tt(DataType.STRING, None if x is None else (*x[:-1], None))]
    return [_tt(DataType.STRING, x)]


@inference("ImageDecoder")
def _image_decoder(op, attrs):
    channels = 1 if attrs.get("pixel_format") == "Grayscale" else 3
    return [TensorType(DataType.UINT8, (None, None, channels))]


@inference("CausalConvWithState")
def _causal_conv(op, attrs):
    x, w, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    if x is None or len(x) != 3:
        return [_tt(dtype, None), _tt(dtype, None)]
    kernel = w[-1] - 1 if w and isinstance(w[-1], int) else None
    return [_tt(dtype, x), _tt(dtype, (x[0], x[1], kernel))]


@inference("LinearAttention")
def _linear_attention(op, attrs):
    q, k, v, dtype = _shape(op, 0), _shape(op, 1), _shape(op, 2), _dtype(op, 0)
    q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if q is None or k is None or v is None or len(q) != 3 or not q_heads or not kv_heads:
        return [_tt(dtype, None), _tt(_dtype(op, 3) or dtype, None)]
    d_k, d_v = _exact_div(k[2], kv_heads), _exact_div(v[2], kv_heads)
    return [
        _tt(dtype, (q[0], q[1], d_v * q_heads if isinstance(d_v, int) else None)),
        _tt(_dtype(op, 3) or dtype, (q[0], kv_heads, d_k, d_v)),
    ]


@inference("FlexAttention", domain="ai.onnx.preview")
def _flex_attention(op, attrs):
    q, v = _shape(op, 0), _shape(op, 2)
    if q is None or v is None or len(q) != 4 or len(v) != 4:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (*q[:3], v[3]))]


# ---- quantization --------------------------------------------------------------------------


@inference("QuantizeLinear")
def _quantize(op, attrs):
    zero_point = _dtype(op, 2)
    dtype = _attr_dtype(attrs.get("output_dtype"), zero_point or DataType.UINT8)
    return [_tt(dtype, _shape(op, 0)) if _tensor(op, 0) else None]


@inference("DequantizeLinear")
def _dequantize(op, attrs):
    dtype = _attr_dtype(attrs.get("output_dtype"), _dtype(op, 1))
    return [_tt(dtype, _shape(op, 0)) if _tensor(op, 0) else None]


@inference("DynamicQuantizeLinear")
def _dynamic_quantize(op, attrs):
    y = _tt(DataType.UINT8, _shape(op, 0)) if _tensor(op, 0) else None
    return [y, TensorType(DataType.FLOAT, ()), TensorType(DataType.UINT8, ())]


# ---- sequences and optionals ---------------------------------------------------------------


@inference("SequenceConstruct")
def _sequence_construct(op, attrs):
    elem = _type(op, 0)
    for i in range(1, len(op.inputs)):
        elem = _join_types(elem, _type(op, i))
    return [None if elem is None else SequenceType(elem)]


@inference("SequenceEmpty")
def _sequence_empty(op, attrs):
    return [SequenceType(TensorType(_attr_dtype(attrs.get("dtype"), DataType.FLOAT), None))]


@inference("SequenceInsert")
def _sequence_insert(op, attrs):
    seq, item = _type(op, 0), _type(op, 1)
    if not isinstance(seq, SequenceType) or item is None:
        return [None]
    elem = _join_types(seq.elem, item)
    return [
        SequenceType(elem if elem is not None else TensorType(item.dtype, None))
        if isinstance(item, TensorType)
        else None
    ]


@inference("SequenceErase")
def _sequence_erase(op, attrs):
    return [_type(op, 0)]


@inference("SequenceAt")
def _sequence_at(op, attrs):
    seq = _type(op, 0)
    return [seq.elem if isinstance(seq, SequenceType) else None]


@inference("SequenceLength")
def _sequence_length(op, attrs):
    return [TensorType(DataType.INT64, ())]


@inference("SplitToSequence")
def _split_to_sequence(op, attrs):
    t = _tensor(op, 0)
    return [None if t is None else SequenceType(TensorType(t.dtype, None))]


@inference("ConcatFromSequence")
def _concat_from_sequence(op, attrs):
    seq = _type(op, 0)
    elem = seq.elem if isinstance(seq, SequenceType) else None
    if not isinstance(elem, TensorType):
        return [None]
    rank = None if elem.shape is None else len(elem.shape) + (1 if attrs.get("new_axis") else 0)
    return [TensorType(elem.dtype, None if rank is None else (None,) * rank)]


@inference("Optional")
def _optional(op, attrs):
    elem = _type(op, 0) if _input(op, 0) is not None else attrs.get("type")
    return [OptionalType(elem) if elem is not None else None]


@inference("OptionalGetElement")
def _optional_get(op, attrs):
    t = _type(op, 0)
    return [t.elem if isinstance(t, OptionalType) else t]


@inference("OptionalHasElement")
def _optional_has(op, attrs):
    return [TensorType(DataType.BOOL, ())]


# ---- control flow --------------------------------------------------------------------------


@inference("If")
def _if(op, attrs):
    then_b, else_b = attrs.get("then_branch"), attrs.get("else_branch")
    if not isinstance(then_b, Block) or not isinstance(else_b, Block):
        return [None] * len(op.outputs)
    return [_join_types(a.type, b.type) for a, b in zip(then_b.outputs, else_b.outputs)]


@inference("Loop")
def _loop(op, attrs):
    body = attrs.get("body")
    n_carried = max(len(op.inputs) - 2, 0)
    if not isinstance(body, Block):
        return [None] * len(op.outputs)
    finals = [
        _join_types(_type(op, 2 + i), body.outputs[1 + i].type if 1 + i < len(body.outputs) else None)
        for i in range(n_carried)
    ]
    scans = []
    for v in body.outputs[1 + n_carried :]:
        t = v.type
        scans.append(
            TensorType(t.dtype, (None, *t.shape) if t.shape is not None else None)
            if isinstance(t, TensorType)
            else None
        )
    return finals + scans


@inference("Scan")
def _scan(op, attrs):
    body = attrs.get("body")
    n_scan_in = attrs.get("num_scan_inputs") or 0
    n_state = len(op.inputs) - n_scan_in
    if not isinstance(body, Block) or n_state < 0:
        return [None] * len(op.outputs)
    in_axes = attrs.get("scan_input_axes") or [0] * n_scan_in
    first = _shape(op, n_state) if n_scan_in else None
    length = None
    if first is not None and n_scan_in and _axis(in_axes[0], len(first)) is not None:
        length = first[_axis(in_axes[0], len(first))]
    states = [
        _join_types(_type(op, i), body.outputs[i].type if i < len(body.outputs) else None)
        for i in range(n_state)
    ]
    per_iter = body.outputs[n_state:]
    out_axes = attrs.get("scan_output_axes") or [0] * len(per_iter)
    scans = []
    for v, axis in zip(per_iter, out_axes):
        t = v.type
        if not isinstance(t, TensorType) or t.shape is None:
            scans.append(None if not isinstance(t, TensorType) else TensorType(t.dtype, None))
            continue
        a = _axis(axis, len(t.shape) + 1)
        scans.append(TensorType(t.dtype, None if a is None else t.shape[:a] + (length,) + t.shape[a:]))
    return states + scans


def _prepare_body(op: Operation) -> None:
    """Give untyped parameters of a Loop or Scan body the types the op passes in."""
    body = op.attributes.get("body")
    if not isinstance(body, Block):
        return
    if op.op_type == "Loop" and not op.domain:
        given = [TensorType(DataType.INT64, ()), TensorType(DataType.BOOL, ())]
        given += [_type(op, i) for i in range(2, len(op.inputs))]
    elif op.op_type == "Scan" and not op.domain:
        n_scan = op.attributes.get("num_scan_inputs") or 0
        n_state = len(op.inputs) - n_scan
        axes = op.attributes.get("scan_input_axes") or [0] * n_scan
        given = [_type(op, i) for i in range(n_state)]
        for j in range(n_scan):
            t = _tensor(op, n_state + j)
            a = None if t is None or t.shape is None else _axis(axes[j], len(t.shape))
            given.append(
                None
                if t is None
                else TensorType(t.dtype, None if a is None else t.shape[:a] + t.shape[a + 1 :])
            )
    else:
        return
    for param, t in zip(body.inputs, given):
        if param.type is None and t is not None:
            param.type = t


# ---- folding small values (shape vectors) --------------------------------------------------


def _shape_value(op, attrs):
    s = _shape(op, 0)
    if s is None:
        return None
    start, end = _shape_range(len(s), attrs)
    dims = s[start:end]
    if all(isinstance(d, int) for d in dims):
        return np.array(dims, dtype=np.int64)
    out = np.empty(len(dims), dtype=object)  # filled in place: np.array would make str dims text
    out[:] = dims
    return out


def _size_value(op, attrs):
    s = _shape(op, 0)
    if s is None or not all(isinstance(d, int) for d in s):
        return None
    return np.array(math.prod(s), dtype=np.int64)


def _cast_value(op, attrs, a):
    to = _attr_dtype(attrs.get("to"), None)
    if to is None:
        return None
    if a.dtype == object:  # partly symbolic dims stay dims through an integer cast
        return a if to in (DataType.INT64, DataType.INT32) else None
    return a.astype(to.numpy)


def _slice_value(op, attrs, a, *_):
    starts, ends = _ints_value(op, 1), _ints_value(op, 2)
    axes = _ints_value(op, 3) if _input(op, 3) is not None else list(range(len(starts or [])))
    steps = _ints_value(op, 4) if _input(op, 4) is not None else [1] * len(starts or [])
    if None in (starts, ends, axes, steps) or 0 in steps:
        return None
    index = [slice(None)] * a.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[ax] = slice(s, e, st)
    return a[tuple(index)]


def _unsqueeze_value(op, attrs, a, axes):
    rank = a.ndim + axes.size
    for ax in sorted(int(x) + rank if x < 0 else int(x) for x in axes.reshape(-1)):
        a = np.expand_dims(a, ax)
    return a


def _squeeze_value(op, attrs, a, *axes):
    return np.squeeze(a, axis=tuple(axes[0].reshape(-1).tolist())) if axes else np.squeeze(a)


def _as_output_shape(op, a):
    """``a`` laid out in the (static) inferred shape of op's first output."""
    t = op.outputs[0].type
    if not isinstance(t, TensorType) or not t.is_static or math.prod(t.shape) != a.size:
        return None
    return a.reshape(t.shape)


def _constant_of_shape_value(op, attrs, s):
    if s.dtype == object or math.prod(s.tolist()) > MAX_FOLDED_ELEMENTS:
        return None
    value = attrs.get("value")
    fill = value.reshape(-1)[0] if isinstance(value, np.ndarray) and value.size else np.float32(0)
    return np.full(tuple(s.tolist()), fill, dtype=np.asarray(fill).dtype)


def _range_value(start, limit, delta):
    # Float ranges may round to another length than ONNX's formula; shapes are integer anyway.
    if start.dtype.kind not in "iu" or not delta:
        return None
    return np.arange(start, limit, delta, dtype=start.dtype)


def _int_div(a, b):
    # ONNX integer division truncates toward zero; numpy's // floors.
    if a.dtype.kind not in "iu":
        return (a / b).astype(a.dtype)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(a.dtype)


def _numeric(fn: Callable) -> Callable:
    """A folder for numbers only: partly symbolic dims (object arrays) do no arithmetic."""

    def fold(op, attrs, *arrays):
        return None if any(a.dtype == object for a in arrays) else fn(*arrays)

    return fold


def _reduce_value(fn: Callable) -> Callable:
    def fold(op, attrs, a, *axes):
        if a.dtype == object or a.ndim != 1:  # shape arithmetic reduces vectors only
            return None
        return _as_output_shape(op, np.asarray(fn(a)).reshape(-1))

    return fold


# How to compute an op's first output from known inputs: fold(op, attrs, *input values).
# The structural folders only move elements around, so they work on partly symbolic dims too.
_FOLDERS: dict[str, Callable] = {
    "Identity": lambda op, attrs, a: a,
    "Cast": _cast_value,
    "Gather": lambda op, attrs, a, i: np.take(a, i.astype(np.int64), axis=attrs.get("axis", 0)),
    "Concat": lambda op, attrs, *arrays: np.concatenate(arrays, axis=attrs.get("axis", 0)),
    "Unsqueeze": _unsqueeze_value,
    "Squeeze": _squeeze_value,
    "Slice": _slice_value,
    "Reshape": lambda op, attrs, a, shape: _as_output_shape(op, a),
    "ConstantOfShape": _constant_of_shape_value,
    "Add": _numeric(np.add),
    "Sub": _numeric(np.subtract),
    "Mul": _numeric(np.multiply),
    "Div": _numeric(_int_div),
    "Max": _numeric(lambda *xs: np.maximum.reduce(np.broadcast_arrays(*xs))),
    "Min": _numeric(lambda *xs: np.minimum.reduce(np.broadcast_arrays(*xs))),
    "Neg": _numeric(np.negative),
    "Abs": _numeric(np.abs),
    "Equal": _numeric(np.equal),
    "Greater": _numeric(np.greater),
    "GreaterOrEqual": _numeric(np.greater_equal),
    "Less": _numeric(np.less),
    "LessOrEqual": _numeric(np.less_equal),
    "And": _numeric(np.logical_and),
    "Or": _numeric(np.logical_or),
    "Not": _numeric(np.logical_not),
    "Where": _numeric(np.where),
    "Range": _numeric(_range_value),
    "ReduceProd": _reduce_value(np.prod),
    "ReduceSum": _reduce_value(np.sum),
}


def _fold(op: Operation, attrs: dict, folded: dict) -> None:
    """Record the value of op's first output when it is small and computable now."""
    if op.domain or not op.outputs:
        return
    if op.op_type in ("Shape", "Size"):
        out = (_shape_value if op.op_type == "Shape" else _size_value)(op, attrs)
    else:
        fn = _FOLDERS.get(op.op_type)
        if fn is None:
            return
        arrays = [value_of(v) for v in op.inputs if v is not None]
        if not arrays or any(a is None or a.size > MAX_FOLDED_ELEMENTS for a in arrays):
            return
        if any(a.dtype.kind in "US" or (a.dtype == object and not _is_dims(a)) for a in arrays):
            return  # string tensors are objects too, but not dims
        out = fn(op, attrs, *arrays)
    if out is None:
        return
    out = np.asarray(out)
    if out.dtype.kind in "US":  # numpy made a lone symbolic dim a str scalar: keep it a dim
        out = out.astype(object)
    if out.size <= MAX_FOLDED_ELEMENTS:
        folded[op.outputs[0]] = out


# Ops whose small outputs inference computes from known inputs (Shape and Size from shapes alone).
FOLDABLE = frozenset(_FOLDERS) | {"Shape", "Size"}


def fold_op(op: Operation) -> np.ndarray | None:
    """The value of ``op``'s first output when its inputs' values (constants) and shapes decide it
    and it is small (shape arithmetic: at most MAX_FOLDED_ELEMENTS elements); otherwise None."""
    schema = lookup(op.domain, op.op_type)
    if schema is None:
        return None
    folded: dict = {}
    try:
        _fold(op, schema.with_defaults(op.attributes), folded)
    except Exception as e:  # as in inference: a value that cannot be folded is computed later
        _log.debug("folding %s failed: %s", op, e)
        return None
    out = folded.get(op.outputs[0]) if op.outputs else None
    return None if out is None or out.dtype == object else out


def fold_values(
    op_type: str, args: list, attributes: dict, out_type: ValueType, domain: str = ""
) -> np.ndarray | None:
    """``fold_op`` of an ``op_type`` applied to the arrays ``args`` (None for an omitted input)
    with ``attributes``, its output typed ``out_type``: the value of an op outside any program
    (a plan step on the host, an expression tried at one value of its leaf)."""
    inputs = []
    for a in args:
        if a is None:
            inputs.append(None)
            continue
        a = np.asarray(a)
        inputs.append(Value("x", TensorType(DataType.from_numpy(a.dtype), a.shape), a))
    op = Operation(op_type, inputs, dict(attributes), domain=domain, num_outputs=1)
    op.outputs[0].type = out_type
    return fold_op(op)


def _is_dims(a: np.ndarray) -> bool:
    return all(d is None or isinstance(d, (int, str)) for d in a.reshape(-1).tolist())


# ---- the pass ------------------------------------------------------------------------------


def infer_op(op: Operation) -> list[ValueType | None]:
    """The inferred type of each output of ``op`` (None where nothing can be said)."""
    schema = lookup(op.domain, op.op_type)
    unknown = [None] * len(op.outputs)
    if schema is None or schema.infer is None:
        return unknown
    attrs = schema.with_defaults(op.attributes)
    try:
        result = list(schema.infer(op, attrs) or [])
    except Exception as e:  # best effort: a malformed op must not stop the pass
        _log.debug("inference of %s failed: %s", op, e)
        return unknown
    return [_clean(t) for t in (result + unknown)[: len(op.outputs)]]


def _clean(t) -> ValueType | None:
    """``t`` with numpy ints made plain ints, or None when it is not a well-formed type."""
    if isinstance(t, (SequenceType, OptionalType)):
        elem = _clean(t.elem)
        return None if elem is None else type(t)(elem)
    if not isinstance(t, TensorType) or not isinstance(t.dtype, DataType):
        return None
    if t.shape is None:
        return t
    if len(t.shape) > MAX_RANK:
        return TensorType(t.dtype, None, t.quant)  # e.g. Expand read a 65536-long shape input
    dims = []
    for d in t.shape:
        if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
            dims.append(int(d))
        elif d is None or isinstance(d, str):
            dims.append(d)
        else:
            return None  # a negative or fractional size: the rule met a malformed model
    return TensorType(t.dtype, tuple(dims), t.quant)


def _refine(declared: ValueType | None, inferred: ValueType | None) -> ValueType | None:
    """The declared type, its unknown rank or unknown dims filled in from the inferred one."""
    if declared is None:
        return inferred
    if not isinstance(declared, TensorType) or not isinstance(inferred, TensorType):
        return declared
    if declared.dtype != inferred.dtype or inferred.shape is None:
        return declared  # a contradiction is the model's word against ours: keep the model's
    if declared.shape is None:
        return TensorType(declared.dtype, inferred.shape, declared.quant)
    if len(declared.shape) != len(inferred.shape) or None not in declared.shape:
        return declared
    dims = tuple(i if d is None else d for d, i in zip(declared.shape, inferred.shape))
    return TensorType(declared.dtype, dims, declared.quant)


def _check_size(op: Operation, out: Value) -> None:
    """A static shape past MAX_TENSOR_BYTES is refused before anything (folding) allocates it."""
    t = out.type
    if not isinstance(t, TensorType) or not t.is_static or t.dtype in (DataType.STRING, DataType.UNDEFINED):
        return
    try:
        item = t.dtype.numpy.itemsize
    except OffloadError:
        return
    nbytes, limit = math.prod(t.shape) * item, _types.MAX_TENSOR_BYTES
    if nbytes > limit:
        raise ShapeError(
            f"{op.op_type} '{op.name or out.name}': output '{out.name}' of shape {list(t.shape)} would take "
            f"{nbytes} bytes, over the {limit}-byte limit (OFFLOAD_MAX_TENSOR_BYTES)"
        )


def _infer_block(block: Block, folded: dict) -> None:
    for op in block.operations:
        try:
            _prepare_body(op)
        except Exception as e:  # a malformed Loop/Scan leaves its body parameters untyped
            _log.debug("typing the body of %s failed: %s", op, e)
        for b in op.blocks:
            _infer_block(b, folded)
        for out, t in zip(op.outputs, infer_op(op)):
            out.type = _refine(out.type, t)
            _check_size(op, out)
        schema = lookup(op.domain, op.op_type)
        if schema is not None:
            try:
                _fold(op, schema.with_defaults(op.attributes), folded)
            except Exception as e:  # folding is an optimization of inference, never an error
                _log.debug("folding %s failed: %s", op, e)


def infer_types(program: Program) -> None:
    """Fill ``Value.type`` of every operation output, in program order.

    Declared types are kept, only their unknown rank or unknown dims filled in; values whose
    type cannot be inferred stay None.
    """
    folded: dict[Value, np.ndarray] = {}
    token = _FOLDED.set(folded)
    try:
        for fn in program.functions.values():
            _infer_block(fn.body, folded)
    finally:
        _FOLDED.reset(token)
