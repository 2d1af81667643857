"""Checking a caller's inputs against what a model declares (shared by evaluate and .pte methods)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from offload.errors import DTypeError, ShapeError
from offload.ir import TensorType


def check_input(name: str, declared, value) -> Any:
    """The value as the model will see it; DTypeError / ShapeError when it does not fit."""
    if not isinstance(declared, TensorType):
        return value
    value = np.asarray(value)
    want = declared.dtype.numpy
    if value.dtype != want and not (want == np.dtype(object) and value.dtype.kind in "US"):
        raise DTypeError(f"input '{name}' has dtype {value.dtype}, the model declares {want}")
    if declared.shape is not None:
        if value.ndim != len(declared.shape):
            raise ShapeError(
                f"input '{name}' has shape {value.shape}, the model declares rank {len(declared.shape)}"
            )
        for got, dim in zip(value.shape, declared.shape):
            if isinstance(dim, int) and got != dim:
                raise ShapeError(f"input '{name}' has shape {value.shape}, the model declares {declared}")
    return value


def check_inputs(declared: Sequence[tuple[str, Any]], inputs: Mapping[str, Any]) -> list:
    """One checked value per declared (name, type), in declaration order.

    Unknown and missing names are ShapeErrors that list the model's inputs.
    """
    names = dict(declared)
    unknown = set(inputs) - set(names)
    if unknown:
        raise ShapeError(f"unknown input(s) {sorted(unknown)}; the model's inputs are {sorted(names)}")
    args = []
    for name, t in names.items():
        if name not in inputs:
            raise ShapeError(f"input '{name}' is missing; the model's inputs are {sorted(names)}")
        args.append(check_input(name, t, inputs[name]))
    return args
