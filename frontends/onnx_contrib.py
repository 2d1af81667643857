"""onnxruntime's contrib operators (domain ``com.microsoft``) rewritten at import into ONNX ops.

Each rewrite follows the operator's definition in onnxruntime's ContribOperators.md and what its
CPU kernel computes, in ONNX operators offload already runs: the CPU executor and the GPU
backends then take the result with no kernel of their own. A rewrite gets a ``_Node`` (the
node's inputs, attributes and which outputs are read, and the importer's builder) and returns
one value per output (None for one nobody reads). A form a rewrite does not take (a 4-D
attention mask, an activation FusedConv does not know) is an ``UnsupportedOpError`` naming the
node, the op and what it holds; an operator of the domain without a rewrite imports as it is and
fails to run with the usual "no CPU kernel for com.microsoft::<Op>".

This module holds the registry (``contrib``, ``handles``, ``rewrite``) and the activation,
product (FusedMatMul, FusedConv, FusedGemm), Trilu and normalization ops, and keeps Inverse as it
is (no ONNX operator inverts a matrix: ir/contrib_ops.py); ``onnx_contrib_attention.py``,
``onnx_contrib_gqa.py`` (GroupQueryAttention), ``onnx_contrib_embed.py``
((Q)EmbedLayerNormalization), ``onnx_contrib_quant.py`` and ``onnx_contrib_nbits.py``
(weight-only quantized MatMulNBits, GatherBlockQuantized) register theirs with the same
decorator, and ``onnx.py`` imports them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType, TensorType, Value, infer_op

DOMAIN = "com.microsoft"

_REWRITES: dict[tuple[str, str], Callable] = {}


def contrib(*ops: str, domain: str = DOMAIN):
    """Register the decorated function as the import rewrite of the named contrib ops."""

    def wrap(fn):
        for op in ops:
            _REWRITES[(domain, op)] = fn
        return fn

    return wrap


def handles(domain: str, op_type: str) -> bool:
    return (domain, op_type) in _REWRITES


class _Node:
    """One contrib node being rewritten: its inputs (None where omitted), attributes, the outputs
    read, and what the rewrite builds with."""

    def __init__(
        self,
        builder,
        op_type: str,
        inputs: list,
        attrs: dict,
        wanted: list[bool],
        where: str,
        domain: str = DOMAIN,
    ):
        self.b, self.op_type, self.attrs, self.wanted, self.where = builder, op_type, attrs, wanted, where
        self.inputs, self.domain = list(inputs), domain

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def wants(self, i: int) -> bool:
        return i < len(self.wanted) and self.wanted[i]

    def refuse(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.where}: {self.domain}::{self.op_type} {what} is not supported")

    def op(self, op_type: str, inputs, attrs=None, num_outputs: int = 1, domain: str = "") -> list[Value]:
        return self.b.op(op_type, inputs, attrs, num_outputs, domain)

    def one(self, op_type: str, inputs, attrs=None) -> Value:
        return self.b.op(op_type, inputs, attrs)[0]

    def const(self, array, dtype=np.int64) -> Value:
        return self.b.const(array, dtype)

    def like(self, value, v: Value) -> Value:
        """A constant ``value`` of ``v``'s element type."""
        return self.b.const(value, self.dtype(v).numpy)

    def type(self, v: Value) -> TensorType:
        t = type_of(v)
        if not isinstance(t, TensorType):
            raise self.refuse(f"with an input '{v.name}' of unknown type")
        return t

    def dtype(self, v: Value) -> DataType:
        return self.type(v).dtype

    def rank(self, v: Value) -> int:
        t = self.type(v)
        if t.rank is None:
            raise self.refuse(f"with an input '{v.name}' of unknown rank")
        return t.rank

    def dim(self, v: Value, axis: int) -> int:
        """A static dimension of ``v`` (refused where it is a symbol or unknown)."""
        d = self.type(v).shape[axis] if self.type(v).shape is not None else None
        if not isinstance(d, int):
            raise self.refuse(f"needs dimension {axis} of '{v.name}' known at import")
        return d


def type_of(v: Value | None):
    """``v``'s type, inferred now (with those of the values it is computed from) where the import
    has not typed it yet: the importer infers types once the whole graph is read."""
    if v is None:
        return None
    pending, seen = [v], set()
    while pending:
        top = pending[-1]
        op = top.producer
        if top.type is not None or op is None or id(op) in seen:
            pending.pop()
            continue
        missing = [x for x in op.inputs if x is not None and x.type is None and x.producer is not None]
        missing = [x for x in missing if id(x.producer) not in seen]
        if missing:
            pending.extend(missing)
            continue
        seen.add(id(op))
        for out, t in zip(op.outputs, infer_op(op)):
            if out.type is None:
                out.type = t
        pending.pop()
    return v.type


def rewrite(builder, domain: str, op_type: str, inputs: list, attrs: dict, wanted: list[bool], where: str):
    """The values standing for the outputs of one contrib node (None for those not read)."""
    node = _Node(builder, op_type, inputs, attrs, wanted, where, domain)
    try:
        out = list(_REWRITES[(domain, op_type)](node))
    except KeyError as e:
        raise ModelFormatError(f"{where}: {domain}::{op_type} has no attribute {e}") from None
    out += [None] * (len(wanted) - len(out))
    for i, v in enumerate(out[: len(wanted)]):
        if wanted[i] and v is None:
            raise node.refuse(f"output {i}")
        if v is not None and (v.producer is None or v in inputs):  # a node's input stays as named
            out[i] = node.one("Identity", [v])
    return out[: len(wanted)]


# ---- activations ---------------------------------------------------------------------------


@contrib("Gelu")
def _gelu(n: _Node):
    return [n.one("Gelu", [n.input(0)])]


@contrib("BiasGelu")
def _bias_gelu(n: _Node):
    return [n.one("Gelu", [n.one("Add", [n.input(0), n.input(1)])])]


@contrib("FastGelu")
def _fast_gelu(n: _Node):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of X (+ bias): ONNX Gelu's tanh form."""
    x = n.input(0)
    if n.input(1) is not None:
        x = n.one("Add", [x, n.input(1)])
    return [n.one("Gelu", [x], {"approximate": "tanh"})]


@contrib("QuickGelu")
def _quick_gelu(n: _Node):
    """x * sigmoid(alpha * x)."""
    x = n.input(0)
    scaled = n.one("Mul", [x, n.like(n.attr("alpha", 1.702), x)])
    return [n.one("Mul", [x, n.one("Sigmoid", [scaled])])]


@contrib("BiasAdd")
def _bias_add(n: _Node):
    """X + bias + skip (X, skip: N x S x C; bias: C)."""
    return [n.one("Add", [n.one("Add", [n.input(0), n.input(1)]), n.input(2)])]


# ---- matrix products and convolutions ------------------------------------------------------


def _batch_transposed(n: _Node, v: Value, batch: bool, matrix: bool) -> Value:
    """FusedMatMul's operand: transBatch moves the first axis to just before the matrix axes
    (``[1, …, r-2, 0, r-1]``), trans swaps the two matrix axes after that."""
    rank = n.rank(v) if batch or matrix else 0
    if rank < 2 or not (batch or matrix):
        return v
    perm = list(range(1, rank - 1)) + [0, rank - 1] if batch and rank > 2 else list(range(rank))
    if matrix:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return v if perm == list(range(rank)) else n.one("Transpose", [v], {"perm": perm})


@contrib("FusedMatMul", "TransposeMatMul")
def _fused_matmul(n: _Node):
    """alpha * (A' @ B'), A' and B' transposed as transA / transB / transBatchA / transBatchB say."""
    a = _batch_transposed(n, n.input(0), bool(n.attr("transBatchA", 0)), bool(n.attr("transA", 0)))
    b = _batch_transposed(n, n.input(1), bool(n.attr("transBatchB", 0)), bool(n.attr("transB", 0)))
    y = n.one("MatMul", [a, b])
    alpha = float(n.attr("alpha", 1.0))
    return [y if alpha == 1.0 else n.one("Mul", [y, n.like(alpha, n.input(0))])]


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def activation(n: _Node, y: Value, name: str, params: list[float]) -> Value:
    """The activation a fused contrib op names, with its parameters (FusedConv, FusedGemm)."""

    def param(i: int) -> float:
        if len(params) <= i:
            raise n.refuse(f"activation {name} with {len(params)} activation_params")
        return float(params[i])

    if name in ("", "Identity"):
        return y
    if name in ("Relu", "Tanh", "Sigmoid"):
        return n.one(name, [y])
    if name == "LeakyRelu":
        return n.one("LeakyRelu", [y], {"alpha": param(0)})
    if name == "HardSigmoid":
        return n.one("HardSigmoid", [y], {"alpha": param(0), "beta": param(1)})
    if name == "Clip":
        return n.one("Clip", [y, n.like(param(0), y), n.like(param(1), y)])
    raise n.refuse(f"activation {name!r}")


@contrib("FusedConv")
def _fused_conv(n: _Node):
    """activation(Conv(X, W, B) + Z)."""
    attrs = {k: v for k, v in n.attrs.items() if k in _CONV_ATTRS}
    y = n.one("Conv", [n.input(0), n.input(1), n.input(2)], attrs)
    if n.input(3) is not None:
        y = n.one("Add", [y, n.input(3)])
    return [activation(n, y, n.attr("activation", ""), list(n.attr("activation_params", [])))]


# FusedGemm's activations (those onnxruntime's CPU kernel takes) and the parameters each reads
# from activation_alpha / activation_beta / activation_gamma; onnxruntime requires every one.
_GEMM_ACTIVATIONS = {
    "Relu": (),
    "Tanh": (),
    "Sigmoid": (),
    "Softsign": (),
    "Softplus": (),
    "LeakyRelu": ("alpha",),
    "Elu": ("alpha",),
    "ThresholdedRelu": ("alpha",),
    "HardSigmoid": ("alpha", "beta"),
    "Selu": ("alpha", "gamma"),
    "ParametricSoftplus": ("alpha", "beta"),
    "ScaledTanh": ("alpha", "beta"),
}


def _gemm_activation(n: _Node, y: Value) -> Value:
    name = n.attr("activation", "")
    if name not in _GEMM_ACTIVATIONS:
        raise n.refuse(f"activation {name!r} (one of {', '.join(_GEMM_ACTIVATIONS)})")
    missing = [f"activation_{k}" for k in _GEMM_ACTIVATIONS[name] if f"activation_{k}" not in n.attrs]
    if missing:
        raise n.refuse(f"activation {name} without {' and '.join(missing)}")
    p = {k: float(n.attrs[f"activation_{k}"]) for k in _GEMM_ACTIVATIONS[name]}
    if name == "ParametricSoftplus":  # alpha * ln(1 + exp(beta * y))
        return n.one(
            "Mul", [n.like(p["alpha"], y), n.one("Softplus", [n.one("Mul", [y, n.like(p["beta"], y)])])]
        )
    if name == "ScaledTanh":  # alpha * tanh(beta * y)
        return n.one("Mul", [n.like(p["alpha"], y), n.one("Tanh", [n.one("Mul", [y, n.like(p["beta"], y)])])])
    return n.one(name, [y], p)


@contrib("FusedGemm")
def _fused_gemm(n: _Node):
    """activation(Gemm(A, B, C))."""
    attrs = {k: n.attrs[k] for k in ("alpha", "beta", "transA", "transB") if k in n.attrs}
    inputs = [n.input(0), n.input(1)] + ([n.input(2)] if n.input(2) is not None else [])
    return [_gemm_activation(n, n.one("Gemm", inputs, attrs))]


@contrib("Trilu")
def _trilu(n: _Node):
    """ONNX's Trilu (the contrib op predates it, with the same inputs and ``upper``)."""
    inputs = [n.input(0)] + ([n.input(1)] if n.input(1) is not None else [])
    return [n.one("Trilu", inputs, {"upper": int(n.attr("upper", 1))})]


@contrib("Inverse")
def _inverse(n: _Node):
    """The node as it is: no ONNX operator inverts a matrix (its schema in ir/contrib_ops.py, its
    CPU kernel in runtime/kernels/linalg.py)."""
    x = n.input(0)
    if n.dtype(x) not in (DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16):
        raise n.refuse(f"of '{x.name}' of {n.dtype(x).name.lower()} (float, double or float16)")
    return n.op("Inverse", [x], {}, domain=n.domain)


# ---- normalizations ------------------------------------------------------------------------


def _skip_sum(n: _Node, bias_at: int) -> Value:
    """input + skip (+ bias): what the Skip…Normalization ops normalize."""
    s = n.one("Add", [n.input(0), n.input(1)])
    if n.input(bias_at) is not None:
        s = n.one("Add", [s, n.input(bias_at)])
    return s


@contrib("SkipLayerNormalization")
def _skip_layer_norm(n: _Node):
    """LayerNormalization over the last axis of input + skip (+ bias), and that sum."""
    s = _skip_sum(n, 4)
    eps = float(n.attr("epsilon", 1e-12))
    inputs = [s, n.input(2)] + ([n.input(3)] if n.input(3) is not None else [])
    y, mean, inv = n.op("LayerNormalization", inputs, {"axis": -1, "epsilon": eps}, num_outputs=3)
    return [y, mean, inv, s]


def _inv_std(n: _Node, x: Value, axis: int, eps: float, stash_type: int) -> Value:
    """1 / sqrt(mean(x^2 over axis…) + eps), kept dims, in float32 where stash_type asks."""
    rank = n.rank(x)
    axis = axis % rank
    if stash_type == 1 and n.dtype(x) != DataType.FLOAT:
        x = n.one("Cast", [x], {"to": int(DataType.FLOAT)})
    mean = n.one("ReduceMean", [n.one("Mul", [x, x]), n.const(list(range(axis, rank)))], {"keepdims": 1})
    return n.one("Reciprocal", [n.one("Sqrt", [n.one("Add", [mean, n.like(eps, mean)])])])


def _rms_norm(n: _Node, x: Value, scale: Value, axis: int, eps: float, stash_type: int, want_inv: bool):
    attrs = {"axis": axis, "epsilon": eps, "stash_type": stash_type}
    y = n.one("RMSNormalization", [x, scale], attrs)
    return y, (_inv_std(n, x, axis, eps, stash_type) if want_inv else None)


@contrib("SimplifiedLayerNormalization", domain="")
@contrib("SimplifiedLayerNormalization")
def _simplified_layer_norm(n: _Node):
    """RMS normalization: X / sqrt(mean(X^2) + epsilon) * scale (onnxruntime defines it in the
    ONNX domain; ONNX's RMSNormalization, opset 23, is the same)."""
    axis, eps = int(n.attr("axis", -1)), float(n.attr("epsilon", 1e-5))
    y, inv = _rms_norm(n, n.input(0), n.input(1), axis, eps, int(n.attr("stash_type", 1)), n.wants(1))
    return [y, inv]


@contrib("SkipSimplifiedLayerNormalization")
def _skip_simplified_layer_norm(n: _Node):
    """RMS normalization over the last axis of input + skip (+ bias), and that sum."""
    s = _skip_sum(n, 3)
    eps = float(n.attr("epsilon", 1e-12))
    y, inv = _rms_norm(n, s, n.input(2), -1, eps, 1, n.wants(2))
    if n.wants(1):
        raise n.refuse("output mean (an RMS normalization computes none)")
    return [y, None, inv, s]
