"""A device-free ``gpu.api.Builder``: runs the shared launchers on a plan and records what they ask for.

It holds no device and builds nothing: ``program`` returns the (source, options) pair and
``launch`` records the kernel name, sizes and arguments. The compile half uses it to find every
kernel a plan needs (to compile them ahead of time with NVRTC); the tests use it to compile every
kernel of many plans without a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError

from ..gpu.api import Buf, Scratch
from ..gpu.ops import LAUNCH
from ..gpu.plan import FORMATS


@dataclass(frozen=True)
class Program:
    """A kernel source and its OpenCL build options, as a launcher asked for them."""

    source: str
    options: str = ""


@dataclass(frozen=True)
class Recorded:
    program: Program
    kernel: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: tuple


@dataclass
class RecordingBuilder:
    """The Builder contract over a plan's shapes, dtypes and weights, with no device.

    ``blas``: offer ``gemm(call)`` as the CUDA builder does (GEMMs are then recorded as calls, not
    as matmul.cl launches)."""

    plan: dict
    host: dict[int, np.ndarray] = field(default_factory=dict)
    blas: bool = False
    launches: list[Recorded] = field(default_factory=list)
    gemms: list = field(default_factory=list)
    aliases: dict[int, int] = field(default_factory=dict)
    programs: dict[Program, None] = field(default_factory=dict)  # in first-asked order

    def __post_init__(self):
        self.shapes = {int(i): tuple(s) for i, s in self.plan["shapes"].items()}
        dtypes = self.plan.get("dtypes") or {}
        self.dtypes = {i: np.dtype(dtypes.get(str(i), "float32")) for i in self.shapes}
        if self.blas:
            self.gemm = self.gemms.append

    def shape(self, v: int) -> tuple[int, ...]:
        return self.shapes[v]

    def dtype(self, v: int) -> np.dtype:
        return self.dtypes[v]

    def const(self, v: int) -> np.ndarray | None:
        while v in self.aliases:
            v = self.aliases[v]
        return self.host.get(v)

    def program(self, source: str, options: str = "") -> Program:
        p = Program(source, options)
        self.programs.setdefault(p)
        return p

    def launch(self, program: Program, kernel: str, global_size, local_size, args: list) -> None:
        if math.prod(global_size) == 0:
            return
        for a in args:
            if not isinstance(a, Buf | Scratch) and not hasattr(a, "values") and not np.isscalar(a):
                raise ModelFormatError(f"gpu backend: kernel {kernel} got argument {a!r}")
        local = tuple(local_size) if local_size is not None else None
        self.launches.append(Recorded(program, kernel, tuple(global_size), local, tuple(args)))

    def constant(self, out: int, value: np.ndarray) -> None:
        value = np.asarray(value, self.dtypes[out])
        if value.shape != self.shapes[out] or out in self.host or out in self.aliases:
            raise ModelFormatError(f"gpu backend: value {out} cannot be the constant {value.shape}")
        self.host[out] = value

    def alias(self, out: int, src: int) -> None:
        if out in self.aliases:
            raise ModelFormatError(f"gpu backend: value {out} aliased twice")
        self.aliases[out] = src


def record(plan: dict, host: dict[int, np.ndarray] | None = None, blas: bool = False) -> RecordingBuilder:
    """Every plan step's launcher run on a RecordingBuilder; the builder holds what they asked."""
    if not isinstance(plan, dict) or plan.get("format") not in FORMATS:
        raise ModelFormatError(f"gpu backend: not a plan (format {plan.get('format')!r})")
    b = RecordingBuilder(plan, dict(host or {}), blas)
    for step in plan["ops"]:
        launcher = LAUNCH.get(step["type"])
        if launcher is None:
            raise UnsupportedOpError(f"gpu backend: no kernel for plan step {step['type']!r}")
        launcher(b, step)
    return b
