"""The op registry: one schema per operator (inputs, attributes with defaults, outputs, inference)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .onnx_ops import ONNX_OPS


@dataclass(frozen=True)
class Param:
    name: str
    optional: bool = False
    variadic: bool = False

    def __str__(self) -> str:
        return self.name + ("?" if self.optional else "*" if self.variadic else "")


@dataclass(frozen=True)
class AttrSpec:
    name: str
    type: str  # int float str tensor graph ints floats strs tensors graphs type ...
    required: bool = False
    default: Any = None


@dataclass
class OpSchema:
    domain: str
    name: str
    inputs: list[Param]
    outputs: list[Param]
    attributes: dict[str, AttrSpec]
    since_version: int = 1
    # infer(op, attrs) -> one type (or None) per output; attrs have schema defaults filled.
    infer: Callable | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.name)

    def with_defaults(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """Every attribute of the schema, the given value or its default (None when it has none)."""
        out = {name: spec.default for name, spec in self.attributes.items()}
        out.update(attributes)
        return out

    def signature(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"{self.name}({ins}) -> {outs}"


_REGISTRY: dict[tuple[str, str], OpSchema] = {}
_LINE = re.compile(r"^(\w+)\((.*?)\) -> (.*?)(?:\s+\|\s+(.*?))?\s+@(\d+)$")


def _params(text: str) -> list[Param]:
    out = []
    for p in filter(None, (x.strip() for x in text.split(","))):
        out.append(Param(p.rstrip("?*"), p.endswith("?"), p.endswith("*")))
    return out


def _attributes(text: str | None) -> dict[str, AttrSpec]:
    specs: dict[str, AttrSpec] = {}
    if not text:
        return specs
    # Defaults may hold commas inside lists, so split on ", name:" boundaries.
    for part in re.split(r",\s+(?=\w+: )", text):
        name, rest = part.split(": ", 1)
        if "=" in rest:
            type_, default = (s.strip() for s in rest.split("=", 1))
            specs[name] = AttrSpec(name, type_, False, ast.literal_eval(default))
        else:
            type_ = rest.strip()
            specs[name] = AttrSpec(name, type_.rstrip("!"), type_.endswith("!"))
    return specs


def parse_schema_line(domain: str, line: str) -> OpSchema:
    m = _LINE.match(line.strip())
    if not m:
        raise ValueError(f"bad schema line: {line!r}")
    name, ins, outs, attrs, since = m.groups()
    return OpSchema(domain, name, _params(ins), _params(outs), _attributes(attrs), int(since))


def register(schema: OpSchema) -> OpSchema:
    _REGISTRY[schema.key] = schema
    return schema


def lookup(domain: str, name: str) -> OpSchema | None:
    """The schema of an operator, or None for an unknown one (unknown ops import fine)."""
    return _REGISTRY.get(("" if domain == "ai.onnx" else domain, name))


def attributes_of(op) -> dict[str, Any]:
    """``op``'s attributes with its schema's defaults filled in (as written for an op without a
    schema: a custom op's, or one of a domain offload does not know)."""
    schema = lookup(op.domain, op.op_type)
    return schema.with_defaults(op.attributes) if schema else dict(op.attributes)


# ONNX ops whose every run draws anew: never folded into constants, never computed once.
RANDOM_OPS = frozenset(
    {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial"}
)


def computed_once(domain: str, name: str) -> bool:
    """Whether an op whose inputs are all constants may run once and keep its results for every
    later run: an ONNX op (other domains hold stateful ops), neither random (Dropout too: in
    training mode it draws a mask) nor holding a nested graph."""
    if domain not in ("", "ai.onnx") or name in RANDOM_OPS or name == "Dropout":
        return False
    schema = lookup(domain, name)
    return schema is not None and not any(a.type == "graph" for a in schema.attributes.values())


# ONNX ops whose output shapes are functions of their input shapes and attributes alone, with,
# for the ops in the second table, the values of the inputs at the given positions (a target
# shape, axes, slice bounds, TopK's k, Range's bounds, OneHot's depth): not of other input data
# (NonZero, Unique, Compress are not here). The one table of which inputs decide a shape: the CPU
# runtime keeps what is computed from such shapes (runtime/shape_specializations.py, _find_shape_steps), the
# GPU backends read those inputs on the host when they specialize (delegates/gpu/host.py).
SHAPE_FROM_SHAPES = frozenset(
    """Abs Acos Acosh Add And Asin Asinh Atan Atanh AveragePool BatchNormalization Cast CastLike Ceil
    Celu Clip Concat Conv Cos Cosh Div Dropout Elu Equal Erf Exp Flatten Floor GRU Gather
    GatherElements Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual HardSigmoid
    HardSwish Identity InstanceNormalization IsInf IsNaN LRN LSTM LayerNormalization LeakyRelu Less
    LessOrEqual Log LogSoftmax MatMul Max MaxPool Mean Min Mish Mod Mul Neg Not Or PRelu Pow RNN
    Reciprocal Relu Round Selu Shape Sigmoid Sign Sin Sinh Size Softmax Softplus Softsign Sqrt Sub
    Sum Tan Tanh ThresholdedRelu Transpose Where Xor
    ArgMax ArgMin BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor ConvInteger ConvTranspose
    CumProd CumSum DeformConv DepthToSpace DequantizeLinear Det DynamicQuantizeLinear Einsum
    GatherND GlobalLpPool GridSample GroupNormalization Hardmax LpNormalization LpPool
    MatMulInteger MaxRoiPool MeanVarianceNormalization QLinearConv QLinearMatMul QuantizeLinear
    RMSNormalization ReverseSequence RoiAlign RotaryEmbedding ScatterElements ScatterND Shrink
    SpaceToDepth Swish Trilu""".split()  # noqa: SIM905 (a word list reads better)
)
SHAPE_FROM_VALUES: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Pad": (1, 3),
    "ConstantOfShape": (0,),
    **dict.fromkeys(
        """ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd
        ReduceSum ReduceSumSquare""".split(),  # noqa: SIM905 (a word list reads better)
        (1,),
    ),
    "TopK": (1,),
    "OneHot": (1,),
    "Range": (0, 1, 2),
    "Split": (1,),
    "Resize": (1, 2, 3),  # roi, scales, sizes (Resize-10: scales at 1)
    "Upsample": (1,),
}


# The two tables above by op domain: other domains add theirs (ir/tflite_ops.py).
_SHAPE_RULES: dict[str, tuple[frozenset, dict[str, tuple[int, ...]]]] = {
    "": (SHAPE_FROM_SHAPES, SHAPE_FROM_VALUES)
}


def shape_rules(domain: str) -> tuple[frozenset, dict[str, tuple[int, ...]]]:
    """The ops of ``domain`` whose output shapes follow from their input shapes, and those whose
    output shapes follow from their input shapes and the values at the given input positions
    (``SHAPE_FROM_SHAPES`` and ``SHAPE_FROM_VALUES`` for ONNX); empty for a domain with none."""
    return _SHAPE_RULES.get("" if domain in ("onnx", "ai.onnx") else domain, (frozenset(), {}))


def register_shape_rules(
    domain: str, from_shapes: frozenset, from_values: dict[str, tuple[int, ...]]
) -> None:
    _SHAPE_RULES[domain] = (from_shapes, from_values)


def all_schemas() -> list[OpSchema]:
    return list(_REGISTRY.values())


def inference(*names: str, domain: str = ""):
    """Decorator: attach a type/shape inference function to the named schemas."""

    def wrap(fn):
        for n in names:
            _REGISTRY[(domain, n)].infer = fn
        return fn

    return wrap


for _domain, _text in ONNX_OPS.items():
    for _line in _text.strip().splitlines():
        register(parse_schema_line(_domain, _line))
