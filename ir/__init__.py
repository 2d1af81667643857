"""The IR: Program → Function → Block → Operation over typed SSA Values, and the op registry."""

from .core import Block, Function, Operation, Program, Value
from .inference import infer_op, infer_types
from .printer import dump
from .registry import AttrSpec, OpSchema, Param, all_schemas, lookup, register
from .types import DataType, OptionalType, QuantParams, SequenceType, TensorType
from .verifier import verify

__all__ = [
    "AttrSpec",
    "Block",
    "DataType",
    "Function",
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
    "dump",
    "infer_op",
    "infer_types",
    "lookup",
    "register",
    "verify",
]
