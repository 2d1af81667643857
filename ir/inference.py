"""Type and shape inference: one rule per operator, and the pass that fills in Value.type.

A rule is registered on the op's schema with ``@inference(...)`` and called as
``rule(op, attrs) -> [type or None per output]`` (``attrs`` with schema defaults filled).
Rules read input types from ``op.inputs[i].type`` and small input values (shape vectors,
axes, pads...) through :func:`~offload.ir.infer_dims.value_of`, which sees constants and, during
:func:`infer_types`, the values the pass has folded (``Shape → Gather → Concat`` chains).
The rules live in one module per op family (``FAMILIES``, the ``infer_*`` modules); what they
read and their dimension arithmetic in ``infer_dims``; the folding in ``infer_fold``.

Inference is best effort: an unknown op, a missing input type or a malformed attribute
gives ``None`` (or an unknown dimension), never an exception.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from offload.errors import OffloadError, ShapeError

from . import (
    infer_control,
    infer_elementwise,
    infer_linalg,
    infer_ml,
    infer_nn,
    infer_quantization,
    infer_reduction,
    infer_sequence,
    infer_signal,
    infer_tensor,
)
from . import types as _types
from .core import Block, Operation, Program, Value
from .infer_control import _prepare_body
from .infer_dims import _FOLDED, MAX_RANK
from .infer_fold import _fold
from .registry import lookup
from .types import DataType, OptionalType, SequenceType, TensorType, ValueType
from .window_cost import check_declared

__all__ = ["infer_op", "infer_types"]

# The op families: importing each registers its rules on the schemas.
FAMILIES = (
    infer_elementwise,
    infer_linalg,
    infer_nn,
    infer_reduction,
    infer_tensor,
    infer_signal,
    infer_quantization,
    infer_sequence,
    infer_control,
    infer_ml,
)

_log = logging.getLogger(__name__)


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
            f"{nbytes} bytes, over the {limit}-byte limit ({_types.TENSOR_BUDGET.explain(limit)})"
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
            check_declared(op, schema.with_defaults(op.attributes))
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
