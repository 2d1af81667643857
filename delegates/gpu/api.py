"""The contract between a launcher (one plan step → kernel launches) and a GPU backend's builder.

A launcher is ``launch(b: Builder, step: dict) -> None``. It reads shapes, dtypes and constant
values through ``b``, gets a program with ``b.program(source, options)`` and records launches with
``b.launch(program, kernel, global_size, local_size, args)``. Sizes are OpenCL's: the global size
counts work-items (a multiple of the local size when one is given); kernels bound-check their
work-item index, so a backend may round the global size up. ``args`` holds ``Buf`` (a plan value's
device buffer), ``Ints`` (a small int32 table, uploaded once at init), ``Scratch`` (a device
buffer of the step's own) and numpy scalars (``np.int32``, ``np.float32``, ``np.int64``).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Protocol

import numpy as np

MAX_RANK = 6

# numpy dtype name → the OpenCL C type holding it (bool as one byte, 0 or 1).
CTYPES = {
    "float32": "float",
    "float64": "double",
    "int8": "char",
    "uint8": "uchar",
    "int16": "short",
    "uint16": "ushort",
    "int32": "int",
    "uint32": "uint",
    "int64": "long",
    "uint64": "ulong",
    "bool": "uchar",
}


@dataclass(frozen=True)
class Buf:
    """The device buffer of plan value ``id``."""

    id: int


@dataclass(frozen=True)
class Ints:
    """A read-only int32 table (shapes, strides) the builder uploads once."""

    values: tuple[int, ...]


@dataclass(frozen=True)
class Scratch:
    """A device buffer of ``nbytes`` owned by one step (e.g. im2col columns); ``key`` names it
    within the step so that several launches can share it."""

    nbytes: int
    key: str = ""


class Builder(Protocol):
    """What a backend gives a launcher while it turns a plan into launches (at init)."""

    def shape(self, v: int) -> tuple[int, ...]: ...

    def dtype(self, v: int) -> np.dtype: ...

    def const(self, v: int) -> np.ndarray | None:
        """The host value of a constant (a weight), or None when ``v`` is computed."""

    def program(self, source: str, options: str = "") -> object:
        """``source`` built (or found in the cache); a build error raises ``KernelError``."""

    def launch(
        self,
        program: object,
        kernel: str,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...] | None,
        args: list,
    ) -> None: ...

    def alias(self, out: int, src: int) -> None:
        """Let ``out`` share ``src``'s buffer (same bytes, another shape): no kernel, no copy."""

    def constant(self, out: int, value: np.ndarray) -> None:
        """``out`` is known at init: uploaded once with the weights, readable by ``const``."""

    precision: str  # "fp32" or "fp16": how float32 values are stored on the device (see float_options)


COMMON = "common.h"


def _read(file: str) -> str:
    return resources.files("offload.kernels_cl").joinpath(file).read_text()


def source(file: str) -> str:
    """A kernel source of ``kernels_cl``; an OpenCL C file (``.cl``) comes with ``common.h`` (the
    float storage macros) in front, so that both backends compile the same text. A ``#line``
    after it keeps the file's own line numbers in build logs."""
    text = _read(file)
    return f"{_read(COMMON)}#line 1\n{text}" if file.endswith(".cl") else text


def common() -> str:
    """``common.h``, which a generated kernel source starts with."""
    return _read(COMMON)


def fp16(b) -> bool:
    """Whether ``b``'s plan stores float32 values as half (compile spec precision=fp16)."""
    return getattr(b, "precision", "fp32") == "fp16"


def float_options(b) -> str:
    """The build option selecting float32 storage in ``common.h``: -DOFFLOAD_FP16 under fp16."""
    return "-DOFFLOAD_FP16" if fp16(b) else ""


def options(b, *opts: str) -> str:
    """Build options ``opts`` plus ``float_options(b)``, space-separated (empty ones dropped)."""
    return " ".join(o for o in (*opts, float_options(b)) if o)


def storage_dtype(dtype, precision: str = "fp32") -> np.dtype:
    """The dtype a value of ``dtype`` has in device memory: float16 for float32 under fp16."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float16) if precision == "fp16" and dtype == np.float32 else dtype


def move_ctype(b, v: int) -> str:
    """The OpenCL C type a data-movement kernel (``-DT=``) copies value ``v``'s elements as:
    its own, or ``ushort`` (the bits of a half) for float32 stored as half."""
    return "ushort" if fp16(b) and b.dtype(v) == np.float32 else ctype(b.dtype(v))


def ctype(dtype) -> str:
    return CTYPES[np.dtype(dtype).name]


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a row-major ``shape`` read as ``out_shape`` (0 along broadcast axes)."""
    shape = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        strides[d] = acc if shape[d] != 1 else 0
        acc *= shape[d]
    return strides


def pad(xs, fill) -> list[int]:
    """``xs`` padded in front to MAX_RANK entries."""
    return [fill] * (MAX_RANK - len(xs)) + list(xs)
