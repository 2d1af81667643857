"""The backend interface: a compile half (capabilities, preprocess) and a runtime half (init, execute).

As in ExecuTorch, the two halves are separate classes: the runtime half of a backend never
imports its compile half, so a machine that only runs .pte files needs no compiler. A
``Backend`` names both halves and loads each one only when it is asked for.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from offload.errors import OffloadError
from offload.ir import DataType, Operation, Program


class CompileSpecError(OffloadError):
    """A compile spec the backend does not know, or a value it cannot take."""


@dataclass(frozen=True)
class CompileSpec:
    """One backend option, stored in the .pte as ExecuTorch's CompileSpec{key, value: bytes}."""

    key: str
    value: bytes

    @classmethod
    def of(cls, key: str, value: str | int | float | bool | bytes) -> CompileSpec:
        """A spec from a typed value: text and numbers as UTF-8 text, booleans as '1' / '0'."""
        if isinstance(value, bytes):
            return cls(key, value)
        if isinstance(value, bool):
            return cls(key, b"1" if value else b"0")
        return cls(key, str(value).encode())

    def text(self) -> str:
        return self.value.decode()

    def integer(self) -> int:
        try:
            return int(self.text())
        except ValueError:
            raise CompileSpecError(
                f"compile spec '{self.key}' must be an integer, got {self.text()!r}"
            ) from None

    def number(self) -> float:
        try:
            return float(self.text())
        except ValueError:
            raise CompileSpecError(
                f"compile spec '{self.key}' must be a number, got {self.text()!r}"
            ) from None

    def flag(self) -> bool:
        if self.value not in (b"0", b"1", b"true", b"false"):
            raise CompileSpecError(f"compile spec '{self.key}' must be 0/1/true/false, got {self.text()!r}")
        return self.value in (b"1", b"true")


@dataclass(frozen=True)
class Support:
    """Whether a backend takes an op, and why not when it does not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class OpCapability:
    """What a backend accepts for one op type: element types, a rank limit, attribute values.

    ``attributes`` maps an attribute name to the values allowed for it (the schema default
    counts as given). Kept as data so that `offload backends` can print it.
    """

    dtypes: frozenset[DataType]
    max_rank: int | None = None
    attributes: Mapping[str, tuple] = field(default_factory=dict)

    def check(self, op: Operation) -> Support:
        from offload.ir import TensorType, attributes_of

        for v in [*op.inputs, *op.outputs]:
            if v is None or not isinstance(v.type, TensorType):
                continue
            if v.type.dtype not in self.dtypes:
                return Support(False, f"dtype {v.type.dtype.short} of '{v.name}' is not supported")
            if self.max_rank is not None and v.type.rank is not None and v.type.rank > self.max_rank:
                return Support(False, f"rank {v.type.rank} of '{v.name}' exceeds {self.max_rank}")
        attrs = attributes_of(op)
        for name, allowed in self.attributes.items():
            if attrs.get(name) not in allowed:
                return Support(
                    False, f"attribute {name}={attrs.get(name)!r} is not supported (takes {list(allowed)})"
                )
        return Support(True)


@dataclass
class PreprocessResult:
    """What a backend's preprocess returns: its blob, and which IR ops each of its steps covers."""

    processed: bytes
    debug_handle_map: dict[int, tuple[int, ...]] = field(default_factory=dict)


class BackendCompiler(abc.ABC):
    """The compile half: says which ops it takes and turns a partition into a blob."""

    name: str = ""
    # Known compile spec keys → what each means (printed in errors and by `offload backends`).
    spec_keys: Mapping[str, str] = {}
    # Op type (default ONNX domain) → what the backend accepts for it.
    capabilities: Mapping[str, OpCapability] = {}
    # Runs quantized models as float (the TFLite GPU delegate's way): to_backend first rewrites
    # integer ops and inner Quantize/Dequantize pairs to float (quantization::integer_as_float).
    quantized_as_float: bool = False

    def supports(self, op: Operation, ctx: Any = None) -> Support:
        """Whether this backend takes ``op``; by default the capability table decides."""
        cap = self.capabilities.get(op.op_type) if op.domain == "" else None
        if cap is None:
            return Support(False, f"{self.name} has no kernel for {op.qualified_type}")
        return cap.check(op)

    def check_specs(self, specs: list[CompileSpec]) -> None:
        for spec in specs:
            if spec.key not in self.spec_keys:
                known = ", ".join(sorted(self.spec_keys)) or "none"
                raise CompileSpecError(
                    f"backend '{self.name}' has no compile spec '{spec.key}' (known: {known})"
                )

    def stores_half(self, compile_specs: list[CompileSpec]) -> bool:
        """Whether these specs make the backend store float32 values as half, so that
        ``to_backend`` measures the value ranges (calibration) and the fp16 error it causes."""
        return False

    @abc.abstractmethod
    def preprocess(self, subprogram: Program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        """Compile one partition (a program with one function) into the backend's blob."""


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; the reason when it cannot."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


# True while the runtime calls ``execute`` for a module loaded with ``strict``: a backend that
# would recover from a problem by itself with a warning (the fp16 guard's float32 rerun) raises
# an ``OffloadError`` instead. A context variable: each thread sees its own call's.
strict_execution: ContextVar[bool] = ContextVar("offload_strict_execution", default=False)

# The ``RunOptions`` of the run that calls ``execute`` (None: the run has none), for a backend
# that can stop inside a call: ``options.check(where)`` raises ``RunTerminated`` once the run's
# deadline has passed or another thread has set ``terminate``. The GPU backends check it in
# their device loops (``gpu.control.run``). A context variable: each thread sees its own run's.
run_options: ContextVar[Any] = ContextVar("offload_run_options", default=None)


class DeviceTensor:
    """A tensor a backend keeps in its device memory between delegate calls (``execute_device``):
    ``shape`` and ``dtype`` are those of the host array it stands for, ``to_host`` copies it out.
    Only the backend that made it reads its memory; the memory is freed with the object."""

    backend: str = ""
    shape: tuple[int, ...] = ()
    dtype: np.dtype = np.dtype(np.float32)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def to_host(self) -> np.ndarray:
        raise NotImplementedError

    def as_array(self):
        """The tensor as an array of its device's own library (a ``pyopencl.array.Array``, a CuPy
        array), of dtype ``dtype``: what ``run(..., output_device="device")`` returns. A backend
        whose tensors have no such array returns a host copy."""
        return self.to_host()


def on_host(values: list) -> list:
    """``values`` with every DeviceTensor copied to the host."""
    return [v.to_host() if isinstance(v, DeviceTensor) else v for v in values]


class BackendRuntime(abc.ABC):
    """The runtime half: turns a blob into a ready handle at load, runs it per call.

    ``thread_safe``: whether ``execute`` may be called on one handle from several threads at
    once. When False (the default, for plugins that never thought about it) the runtime calls
    ``execute`` on a handle from one thread at a time.

    ``device_tensors``: whether the backend implements ``execute_device``: then a delegate output
    that only delegates of the same backend read stays in device memory between them (ExecuTorch
    keeps tensors on the device across delegates the same way); the runtime decides which at
    load, from the method's instructions."""

    name: str = ""
    thread_safe: bool = False
    device_tensors: bool = False

    @abc.abstractmethod
    def is_available(self) -> Availability:
        """Whether this machine can run the backend (driver, device, libraries), and why not."""

    def devices(self) -> list[str]:
        """Human-readable names of the devices this backend would run on here."""
        return []

    @abc.abstractmethod
    def init(
        self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]
    ) -> Any:
        """Prepare a blob for execution: compile kernels, upload ``weights`` (by tensor name,
        zero-copy views into the .pte, shared with the CPU fallback). Returns a handle."""

    @abc.abstractmethod
    def execute(self, handle: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the partition on its (non-constant) inputs; returns its outputs in order."""

    def execute_device(self, handle: Any, inputs: list, keep: list[bool]) -> list:
        """``execute`` where ``inputs`` may hold this backend's ``DeviceTensor``s (read where they
        are; another backend's are copied to the host first) and output k is returned as a
        ``DeviceTensor`` when ``keep[k]`` and ``keeps_on_device(handle)`` (else as an array).
        Only called when ``device_tensors`` is True."""
        raise NotImplementedError

    def adopt(self, handle: Any, array: Any) -> DeviceTensor | None:
        """A caller's input array (a ``pyopencl.array.Array``, or a DLPack exporter on a GPU)
        as this backend's ``DeviceTensor`` for ``handle``, without copying it, when it lives
        where the handle runs (the same OpenCL context, the same CUDA device); else None, and
        the runtime copies it to the host. Only called when ``device_tensors`` is True."""
        return None

    def array_device(self, handle: Any) -> Any:
        """What a caller makes arrays on so that ``adopt`` takes them (the opencl backend's
        ``pyopencl.CommandQueue``, the cuda backend's ``cupy.cuda.Device``); None if nothing."""
        return None

    def keeps_on_device(self, handle: Any) -> bool:
        """Whether ``execute_device`` may leave this handle's outputs on the device (a handle
        that must look at its outputs on the host, such as the fp16 guard's, says no)."""
        return False

    def destroy(self, handle: Any) -> None:  # noqa: B027 - optional: most backends hold nothing to free
        """Release what ``init`` acquired."""

    def describe(self, handle: Any) -> str:
        """One line on how a handle runs (e.g. what a new input shape costs), for `offload inspect`."""
        return ""


@dataclass(frozen=True)
class Backend:
    """A backend as the registry knows it: its name and a loader for each half."""

    name: str
    compiler: Callable[[], BackendCompiler]
    runtime: Callable[[], BackendRuntime]
    description: str = ""
