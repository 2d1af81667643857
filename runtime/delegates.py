"""Backend delegates at run time: each BackendDelegate bound to its backend, or to its CPU fallback.

At load, ``bind`` resolves a plan's delegate by its id through the registry, checks that the
backend can run here and calls its ``init`` once with the blob, the compile specs (without
offload's reserved ``offload.*`` keys) and the weights: the fallback plan's constants by name,
the same read-only views into the file that the fallback itself runs on. When any of that
fails, the delegate runs its fallback plan on the CPU kernels instead (docs/pte.md).
"""

from __future__ import annotations

import contextlib
import json
import threading
import warnings
from typing import Any, NamedTuple

import numpy as np

from offload.delegates import faults
from offload.delegates.backend import DeviceTensor, on_host, run_options, strict_execution
from offload.errors import (
    BackendUnavailableError,
    DTypeError,
    KernelError,
    ModelFormatError,
    OffloadError,
    RunTerminated,
    ShapeError,
)
from offload.profile import active
from offload.schemas.generated.executorch_flatbuffer.DataLocation import DataLocation
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes

from .pte_values import tensor_decl, tensor_name

RESERVED_PREFIX = "offload."
FALLBACK_PLAN_KEY = "offload.fallback_plan"
FP16_ERROR_KEY = "offload.fp16_error"
ON_BACKEND, ON_CPU = "backend", "cpu fallback"


class DelegateInfo(NamedTuple):
    """Where one delegate of a method runs, and why it does not run on its backend."""

    backend: str
    runs_on: str  # "backend" or "cpu fallback"
    reason: str


def find_backend(name: str):
    """The registry's Backend named ``name``, or None (imported lazily: plain runs need no plugins)."""
    from offload.delegates import registry

    return registry.find(name)


class Delegate:
    """One BackendDelegate of a plan, ready to run: a backend handle, or the fallback Method."""

    def __init__(self, backend: str, fallback, where: str, strict: bool = False):
        self.backend = backend
        self.strict = strict
        self.fallback = fallback  # the fallback plan's Method
        self.where = where
        self.runtime: Any = None
        self.handle: Any = None
        self.reason = ""
        self.notes: dict[str, bytes] = {}  # offload's reserved specs besides the fallback plan
        self._said: set[str] = set()  # specialization refusals already warned about
        # Serializes ``execute`` for backends that do not say they are thread-safe.
        self._lock = contextlib.nullcontext()

    @property
    def on_backend(self) -> bool:
        return self.runtime is not None

    def info(self) -> DelegateInfo:
        return DelegateInfo(self.backend, ON_BACKEND if self.on_backend else ON_CPU, self.reason)

    def detail(self) -> str:
        """The backend's own line on how this delegate runs (``BackendRuntime.describe``)."""
        if not self.on_backend:
            return ""
        try:
            said = self.runtime.describe(self.handle)
        except Exception:  # third-party code: a description is never worth a failure
            said = ""
        if FP16_ERROR_KEY in self.notes:
            said = "\n".join(
                s
                for s in (said, describe_fp16_error(self.notes[FP16_ERROR_KEY].decode(errors="replace")))
                if s
            )
        return said

    def keeps_on_device(self) -> bool:
        """Whether this delegate's outputs may stay in its backend's device memory."""
        if not self.on_backend or not getattr(self.runtime, "device_tensors", False):
            return False
        try:
            return bool(self.runtime.keeps_on_device(self.handle))
        except Exception:  # third-party code: then nothing stays on the device
            return False

    @property
    def takes_device_tensors(self) -> bool:
        """Whether a device tensor may be handed to this delegate: its backend reads them
        (``execute_device``), or it runs on the CPU fallback, which copies them to the host."""
        return not self.on_backend or bool(getattr(self.runtime, "device_tensors", False))

    def reads_device_tensors_of(self, producer: Delegate) -> bool:
        """Whether this delegate takes ``producer``'s device tensors as inputs (same backend, both
        running on it, execute_device implemented)."""
        return (
            self.on_backend
            and self.backend == producer.backend
            and type(self.runtime) is type(producer.runtime)
            and getattr(self.runtime, "device_tensors", False)
        )

    def adopt(self, array) -> DeviceTensor | None:
        """A caller's device array as this delegate's backend takes it without a host copy
        (``BackendRuntime.adopt``), or None."""
        if not self.on_backend or not getattr(self.runtime, "device_tensors", False):
            return None
        try:
            return self.runtime.adopt(self.handle, array)
        except Exception:  # third-party code: then the array goes through the host
            return None

    def array_device(self):
        """What a caller makes arrays on for this delegate (``BackendRuntime.array_device``)."""
        if not self.on_backend:
            return None
        try:
            return self.runtime.array_device(self.handle)
        except Exception:  # third-party code: then it names none
            return None

    def run(self, inputs: list, declared: list, options=None, keep: list[bool] | None = None) -> list:
        """The delegate's outputs for ``inputs``; ``declared`` are the output slots' Tensor decls;
        ``options`` (``RunOptions``) are checked again once the backend returns. ``keep`` (from
        ``Method``'s links at load) says which outputs may stay on the device; inputs may be
        device tensors of this backend.

        A backend that fails (raises, or returns outputs that are not what the file declares)
        costs this call a run on the CPU fallback with one warning per reason: a failure never
        becomes a partial or wrong output. Under ``strict`` it raises instead."""
        if not self.on_backend:
            return self.fallback._call(on_host(inputs), options, active())
        try:
            with self._lock:
                faults.check(self.backend, "execute")
                token = strict_execution.set(self.strict)
                bounds = run_options.set(options)
                try:
                    if keep is not None or any(isinstance(x, DeviceTensor) for x in inputs):
                        keep = keep or [False] * len(declared)
                        outputs = self.runtime.execute_device(self.handle, inputs, keep)
                    else:
                        outputs = self.runtime.execute(self.handle, inputs)
                finally:
                    run_options.reset(bounds)
                    strict_execution.reset(token)
            if options is not None:
                options.check(self.where)
            return self._checked(outputs, declared)
        except RunTerminated:
            raise
        except OffloadError as e:  # SpecializationError: shapes beyond what the backend runs
            return self._fall_back(e, inputs, options)
        except Exception as e:
            error = KernelError(
                f"{self.where}: backend '{self.backend}' failed in execute: {type(e).__name__}: {e}"
            )
            error.__cause__ = e
            return self._fall_back(error, inputs, options)

    def _fall_back(self, error: OffloadError, inputs: list, options) -> list:
        """This call on the CPU fallback, said once per delegate and reason (strict: raise)."""
        if self.strict:
            raise error
        text = str(error).removeprefix(f"{self.where}: ")
        if text not in self._said:
            self._said.add(text)
            warnings.warn(
                f"{self.where}: {text}; this call runs on the CPU fallback", RuntimeWarning, stacklevel=7
            )
        return self.fallback._call(on_host(inputs), options, active())

    def _checked(self, outputs, declared: list) -> list:
        """A backend's results must match the outputs the file declares: count, dtype, shape."""
        if not isinstance(outputs, (list, tuple)) or len(outputs) != len(declared):
            got = len(outputs) if isinstance(outputs, (list, tuple)) else type(outputs).__name__
            raise KernelError(
                f"{self.where}: backend '{self.backend}' returned {got} outputs; the delegate has {len(declared)}"
            )
        out = []
        for k, (value, decl) in enumerate(zip(outputs, declared)):
            value = np.asarray(value) if isinstance(value, np.generic) else value
            if decl is None:
                out.append(value)
                continue
            what = f"{self.where}: backend '{self.backend}' output {k}"
            if not isinstance(value, np.ndarray | DeviceTensor) or value.dtype != decl.numpy:
                got = getattr(value, "dtype", type(value).__name__)
                raise DTypeError(f"{what} is {got}; the delegate declares {decl.numpy}")
            if decl.sizes is not None and not _shape_fits(value.shape, decl.sizes):
                raise ShapeError(
                    f"{what} has shape {list(value.shape)}; the delegate declares {list(decl.sizes)}"
                )
            out.append(value)
        return out

    def destroy(self) -> None:
        runtime, handle = self.runtime, self.handle
        self.runtime = self.handle = None
        if runtime is not None:
            runtime.destroy(handle)


def describe_fp16_error(text: str) -> str:
    """A delegate's measured fp16 error (JSON written by ``offload.calibrate``) as one line."""
    try:
        found = json.loads(text)
        parts = [
            f"{o['name']} {o['max_abs']:.3g}"
            + (f" ({o['max_abs'] / o['scale']:.2%} of its largest value)" if o["scale"] else "")
            for o in found["outputs"]
        ]
        return f"fp16 error against float32 on {found['samples']} calibration sample(s): " + ", ".join(parts)
    except (ValueError, RecursionError, KeyError, TypeError, ZeroDivisionError):
        return "fp16 error: unreadable record"


def _shape_fits(shape: tuple, sizes: tuple) -> bool:
    return len(shape) == len(sizes) and all(d == -1 or d == s for s, d in zip(shape, sizes))


def bind(method, k: int, entry, strict: bool) -> Delegate:
    """Delegate ``k`` of ``method``'s plan, initialized on its backend when it can run there."""
    where = f"{method.where}: delegate {k}"
    if entry is None or not entry.id:
        raise ModelFormatError(f"{where}: the delegate has no backend id")
    specs, fallback_index, notes = _specs(entry, where)
    plans = method.module._plans
    if not 0 <= fallback_index < len(plans) or fallback_index == method.index:
        raise ModelFormatError(f"{where}: fallback plan {fallback_index} does not exist")
    delegate = Delegate(entry.id, plans[fallback_index], f"{where} ('{entry.id}')", strict)
    delegate.notes = notes
    processed = _processed(method.module, entry, where)
    runtime, reason = _available(entry.id)
    if runtime is not None:
        try:
            faults.check(entry.id, "init")
            delegate.handle = runtime.init(processed, specs, weights(delegate.fallback))
            delegate.runtime = runtime
            if not getattr(runtime, "thread_safe", False):
                delegate._lock = threading.Lock()
        except Exception as e:  # a backend's failure to initialize means: run on the CPU
            reason = f"init failed: {type(e).__name__}: {e}"
    if delegate.runtime is None:
        delegate.reason = reason
        _fall_back(method.module, entry.id, reason, where, strict)
    return delegate


def _available(name: str) -> tuple[Any, str]:
    """The backend's runtime half when it can run here, else (None, why not)."""
    try:
        backend = find_backend(name)
    except ImportError as e:
        return None, f"no backend registry ({e})"
    if backend is None:
        return None, f"backend '{name}' is not installed"
    try:
        runtime = backend.runtime()
        available = runtime.is_available()
    except Exception as e:  # third-party code: any failure means the backend is not usable
        return None, f"its runtime failed to load: {type(e).__name__}: {e}"
    if not available:
        return None, getattr(available, "reason", "") or "not available on this machine"
    return runtime, ""


def _fall_back(module, backend: str, reason: str, where: str, strict: bool) -> None:
    if strict:
        raise BackendUnavailableError(f"{where}: backend '{backend}' cannot run it: {reason}")
    if backend not in module._warned_backends:
        module._warned_backends.add(backend)
        warnings.warn(
            f"{module.origin}: backend '{backend}' cannot run here ({reason}); "
            "its delegates run on the CPU fallback",
            RuntimeWarning,
            stacklevel=7,  # at the caller of runtime.load
        )


def _specs(entry, where: str) -> tuple[list, int, dict[str, bytes]]:
    """The backend's compile specs (offload's own keys removed), the fallback plan index, and
    offload's other reserved specs (notes such as the measured fp16 error)."""
    from offload.delegates.backend import CompileSpec

    specs, fallback, notes = [], None, {}
    for s in entry.compileSpecs or []:
        key = s.key or ""
        value = bytes(np.asarray(s.value, dtype=np.uint8)) if s.value is not None else b""
        if key == FALLBACK_PLAN_KEY:
            fallback = value
        elif key.startswith(RESERVED_PREFIX):
            notes[key] = value
        else:
            specs.append(CompileSpec(key, value))
    try:
        return specs, int(fallback.decode()), notes
    except (AttributeError, ValueError, UnicodeDecodeError):
        raise ModelFormatError(f"{where}: no valid '{FALLBACK_PLAN_KEY}' compile spec") from None


def _processed(module, entry, where: str) -> bytes:
    ref = entry.processed
    if ref is None:
        raise ModelFormatError(f"{where}: the delegate has no processed data")
    index = int(ref.index)
    if ref.location == DataLocation.INLINE:
        inline = module.pte.program.backendDelegateData or []
        if not 0 <= index < len(inline) or inline[index] is None:
            raise ModelFormatError(
                f"{where}: inline delegate data {index} does not exist ({len(inline)} entries)"
            )
        data = inline[index].data
        return bytes(np.asarray(data if data is not None else [], dtype=np.uint8))
    if ref.location == DataLocation.SEGMENT:
        segments = module.pte.segments
        if not 0 <= index < len(segments):
            raise ModelFormatError(
                f"{where}: delegate segment {index} does not exist ({len(segments)} segments)"
            )
        return bytes(segments[index])
    raise ModelFormatError(f"{where}: unknown delegate data location {ref.location}")


def weights(fallback) -> dict[str, np.ndarray]:
    """The fallback plan's constants by name: the views into the file it runs on itself."""
    out = {}
    for i, array in fallback.constants.items():
        out[tensor_name(fallback._values[i]) or f"constant{i}"] = array
    return out


def output_decls(method, slots: list[int]) -> list:
    """The Tensor declaration of each output slot (None for slots that are not tensors)."""
    out = []
    for i in slots:
        e = method._values[i]
        out.append(
            tensor_decl(e.val, method._value_where(i)) if i and e.valType == KernelTypes.Tensor else None
        )
    return out
