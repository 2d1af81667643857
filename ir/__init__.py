"""The IR: Program → Function → Block → Operation over typed SSA Values, and the op registry."""

from . import (
    contrib_ops,  # noqa: F401  (registers the com.microsoft operators kept whole)
    detection_ops,  # noqa: F401  (registers offload::DetectionPostProcess)
    tflite_ops,  # noqa: F401  (registers the offload.tflite integer operators)
)
from .core import Block, Function, Operation, Program, Value
from .inference import infer_op, infer_types
from .printer import dump
from .registry import (
    RANDOM_OPS,
    SHAPE_FROM_SHAPES,
    SHAPE_FROM_VALUES,
    AttrSpec,
    OpSchema,
    Param,
    all_schemas,
    attributes_of,
    computed_once,
    lookup,
    register,
    shape_rules,
)
from .rewrite import (
    Namer,
    build,
    insert_after,
    insert_before,
    remove_dead_ops,
    replace_all_uses,
    substitute,
    toposort,
)
from .types import DataType, OptionalType, QuantParams, SequenceType, TensorType
from .verifier import verify

__all__ = [
    "RANDOM_OPS",
    "SHAPE_FROM_SHAPES",
    "SHAPE_FROM_VALUES",
    "AttrSpec",
    "Block",
    "DataType",
    "Function",
    "Namer",
    "OpSchema",
    "Operation",
    "OptionalType",
    "Param",
    "Program",
    "QuantParams",
    "SequenceType",
    "TensorType",
    "Value",
    "all_schemas",
    "attributes_of",
    "build",
    "computed_once",
    "dump",
    "infer_op",
    "infer_types",
    "insert_after",
    "insert_before",
    "lookup",
    "register",
    "remove_dead_ops",
    "replace_all_uses",
    "shape_rules",
    "substitute",
    "toposort",
    "verify",
]
