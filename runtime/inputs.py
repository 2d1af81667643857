"""Checking a caller's inputs against what a model declares (shared by evaluate and .pte methods)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from offload.errors import DTypeError, ShapeError
from offload.ir import TensorType

from .device_inputs import DeviceInput, device_input


def host_array(name: str, value) -> np.ndarray:
    """``value`` (not in device memory) as a numpy array: through DLPack for an object that
    offers it (a torch CPU tensor shares its memory), else ``np.asarray``."""
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if hasattr(value, "__dlpack__") and not isinstance(value, (np.ndarray, np.generic)):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise DTypeError(f"input '{name}': numpy cannot read this {kind} ({e})") from None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"input '{name}': numpy cannot read this {kind} ({e})") from None
    if array.dtype == object and not isinstance(value, (list, tuple)):  # no array protocol
        raise DTypeError(
            f"input '{name}': numpy cannot read a {kind}; inputs are numpy arrays, DLPack "
            "exporters or pyopencl arrays"
        )
    return array


def check_input(name: str, declared, value, device: bool = False) -> Any:
    """The value as the model will see it; DTypeError / ShapeError when it does not fit. An array
    in device memory is checked where it is and kept as a ``DeviceInput`` under ``device``, else
    copied to the host."""
    if not isinstance(declared, TensorType):
        return value
    if type(value) is not np.ndarray:
        found = device_input(name, value)
        value = host_array(name, value) if found is None else found
    want = declared.dtype.numpy
    if value.dtype != want and not (want == np.dtype(object) and value.dtype.kind in "US"):
        raise DTypeError(f"input '{name}' has dtype {value.dtype}, the model declares {want}")
    shape = tuple(value.shape)
    if declared.shape is not None:
        if len(shape) != len(declared.shape):
            raise ShapeError(
                f"input '{name}' has shape {shape}, the model declares rank {len(declared.shape)}"
            )
        for got, dim in zip(shape, declared.shape):
            if isinstance(dim, int) and got != dim:
                raise ShapeError(f"input '{name}' has shape {shape}, the model declares {declared}")
    return value.to_host() if isinstance(value, DeviceInput) and not device else value


def check_inputs(
    declared: Sequence[tuple[str, Any]], inputs: Mapping[str, Any], device: bool = False
) -> list:
    """One checked value per declared (name, type), in declaration order; with ``device``, arrays
    in device memory stay there as ``DeviceInput``s (``check_input``).

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
        args.append(check_input(name, t, inputs[name], device))
    return args


def plain_array_ports(declared: Sequence[tuple[str, Any]]) -> tuple | None:
    """(name, numpy dtype, dims with None where symbolic) of each declared input, for
    ``plain_arrays``; None where one is not a tensor of known rank (or has no numpy type)."""
    out = []
    for name, t in declared:
        if not isinstance(t, TensorType) or t.shape is None or t.dtype.numpy == np.dtype(object):
            return None
        out.append((name, t.dtype.numpy, tuple(d if isinstance(d, int) else None for d in t.shape)))
    return tuple(out)


def plain_arrays(ports: tuple, inputs: Mapping[str, Any]) -> list | None:
    """The inputs in declaration order where each is a numpy array of its port's dtype, rank and
    static dims, and no other name is given (what ``check_inputs`` returns for them, without its
    conversions); None for anything else, which ``check_inputs`` then converts or refuses."""
    if len(inputs) != len(ports):
        return None
    args = []
    for name, dtype, dims in ports:
        value = inputs.get(name)
        if type(value) is not np.ndarray or value.dtype != dtype or len(value.shape) != len(dims):
            return None
        for got, dim in zip(value.shape, dims):
            if dim is not None and got != dim:
                return None
        args.append(value)
    return args
