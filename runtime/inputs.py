"""Checking a caller's inputs against what a model declares (shared by evaluate and .pte methods)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from offload.errors import DTypeError, ShapeError
from offload.ir import TensorType


def host_array(name: str, value) -> np.ndarray:
    """``value`` as a numpy array: through DLPack for an object that offers it (a torch CPU
    tensor shares its memory), else ``np.asarray``. An array that lives in device memory is a
    DTypeError that says to copy it to the host: inputs are read on the host."""
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if hasattr(value, "__dlpack__") and not isinstance(value, (np.ndarray, np.generic)):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise DTypeError(
                f"input '{name}': numpy cannot read this {kind} ({e}); a device array "
                "goes in as a host copy (e.g. .get() or .cpu())"
            ) from None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"input '{name}': numpy cannot read this {kind} ({e})") from None
    if array.dtype == object and not isinstance(value, (list, tuple)):  # no array protocol
        raise DTypeError(
            f"input '{name}': numpy cannot read a {kind}; a device array "
            "goes in as a host copy (e.g. .get() or .cpu())"
        )
    return array


def check_input(name: str, declared, value) -> Any:
    """The value as the model will see it; DTypeError / ShapeError when it does not fit."""
    if not isinstance(declared, TensorType):
        return value
    value = value if type(value) is np.ndarray else host_array(name, value)
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
