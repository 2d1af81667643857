"""A device-free ``gpu.api.Builder``: runs the shared launchers on a plan and records what they ask for.

It holds no device and builds nothing: ``program`` returns the (source, options) pair and
``launch`` records the kernel name, sizes and arguments. The compile half uses it to find every
kernel a plan needs (to compile them ahead of time with NVRTC); the tests use it to compile every
kernel of many plans without a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from offload.errors import ModelFormatError

from ..gpu.api import Buf, Ints, Scratch
from ..gpu.builder import PlanValues
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


class RecordingBuilder(PlanValues):
    """The Builder contract over a plan's shapes, dtypes and weights, with no device.

    ``blas``: offer ``gemm(call)`` as the CUDA builder does (GEMMs are then recorded as calls, not
    as matmul.cl launches). ``device_kind``: "cpu" records the kernels the opencl backend makes
    for a CPU device (the packed GEMM, im2col_packed ...), which compile under NVRTC as well."""

    def __init__(
        self,
        plan: dict,
        host: dict[int, np.ndarray] | None = None,
        blas: bool = False,
        inputs=None,
        device_kind: str = "gpu",
    ):
        super().__init__(plan, dict(host or {}), inputs)
        self.device_kind = device_kind
        self.launches: list[Recorded] = []
        self.gemms: list = []
        self.programs: dict[Program, None] = {}  # in first-asked order
        if blas:
            self.gemm = self.gemms.append

    def program(self, source: str, options: str = "") -> Program:
        self.check_options(options)
        p = Program(source, options)
        self.programs.setdefault(p)
        return p

    def launch(self, program: Program, kernel: str, global_size, local_size, args: list) -> None:
        if math.prod(global_size) == 0:
            return
        for a in args:
            if not isinstance(a, Buf | Scratch | Ints) and not np.isscalar(a):
                raise ModelFormatError(f"gpu backend: kernel {kernel} got argument {a!r}")
        local = tuple(local_size) if local_size is not None else None
        self.launches.append(Recorded(program, kernel, tuple(global_size), local, tuple(args)))


def record(
    plan: dict,
    host: dict[int, np.ndarray] | None = None,
    blas: bool = False,
    inputs: dict | None = None,
    device_kind: str = "gpu",
) -> RecordingBuilder:
    """Every plan step's launcher run on a RecordingBuilder (a symbolic plan specialized to the
    input shapes ``inputs``, value id → shape); the builder holds what they asked."""
    if not isinstance(plan, dict) or plan.get("format") not in FORMATS:
        raise ModelFormatError(f"gpu backend: not a plan (format {plan.get('format')!r})")
    b = RecordingBuilder(plan, host, blas, inputs, device_kind)
    b.record(plan)
    return b
