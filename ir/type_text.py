"""Value types as ONNX-style text (``tensor(float)``, ``seq(tensor(int64))``) and back.

The .pte format stores a ``type`` attribute (Optional's ``type``, …) as this text; shapes are
not part of it, only element types and nesting.
"""

from __future__ import annotations

import re

from .types import DataType, OptionalType, SequenceType, TensorType, ValueType

_WRAPPERS = {"seq": SequenceType, "optional": OptionalType}
_TEXT = re.compile(r"^(tensor|seq|optional)\((.*)\)$")


def type_text(t: ValueType) -> str:
    """``tensor(float)``, ``seq(tensor(int64))``, ``optional(seq(tensor(string)))``."""
    if isinstance(t, TensorType):
        return f"tensor({t.dtype.name.lower()})"
    if isinstance(t, SequenceType):
        return f"seq({type_text(t.elem)})"
    if isinstance(t, OptionalType):
        return f"optional({type_text(t.elem)})"
    raise ValueError(f"no text form for type {t!r}")


def parse_type_text(text: str) -> ValueType:
    """The inverse of ``type_text``; ValueError for anything else."""
    m = _TEXT.match(text.strip())
    if not m:
        raise ValueError(f"not a type: {text!r}")
    kind, inner = m.groups()
    if kind == "tensor":
        try:
            return TensorType(DataType[inner.upper()])
        except KeyError:
            raise ValueError(f"unknown element type {inner!r} in {text!r}") from None
    return _WRAPPERS[kind](parse_type_text(inner))
