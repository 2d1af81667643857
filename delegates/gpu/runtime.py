"""The runtime half both GPU backends share: ``GPURuntime``, a handle per blob, a specialization per
input signature, and ``execute`` (copy in, launch, copy out); each backend fills the device hooks.

As tinygrad's devices fill a few hooks of one base, the ``opencl`` and ``cuda`` runtimes subclass
``GPURuntime`` and say only how their device does things. What the base does, in order:

- ``init``: the blob → the plan (``unpack``), the weights uploaded once into buffers of
  ``handle.device.allocator.alloc`` (``upload``), a specialization built for each set of the
  ``shapes`` spec, an fp16_check twin made on demand (``gpu/precision.py``);
- a specialization (``gpu/specialize.py``): every plan step's launcher records its launches on the
  backend's ``builder``; buffers are placed by lifetime (``gpu/builder.py``), host values
  uploaded, each launch's arguments bound (value ids → buffers, int tables uploaded by ``table``,
  then ``bind``);
- ``execute``: the signature's specialization found (or built), inputs copied in (``copy_in``;
  ``copy_tensor`` for this backend's device tensors), the launches run (``launch``, or
  ``launch_profiled`` under a profile, or ``gpu.control.run`` with ``enqueue`` / ``copy_buffer`` /
  ``read_condition`` / ``write_value`` for a plan with If / Loop), outputs copied out
  (``copy_out``), the fp16 guard applied.

One call at a time per handle (its lock), so ``thread_safe``. It imports nothing of a compile half.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from offload import profile
from offload.errors import DTypeError, KernelError, OffloadError

from ..backend import BackendRuntime, CompileSpec, DeviceTensor, on_host, run_options
from . import control
from .api import Buf, Ints
from .builder import PlanValues, host_weights
from .plan import parse
from .precision import Fp32Rerun
from .specialize import (
    Specializations,
    describe,
    host_values,
    input_shapes,
    max_shapes,
    planned_shapes,
    resident_inputs,
    signature,
)

__all__ = ["GPURuntime", "GPUTensor", "Handle", "Specialized", "compile_spec"]


def compile_spec(specs: list[CompileSpec], key: str) -> CompileSpec | None:
    """The spec named ``key``, or None."""
    return next((s for s in specs if s.key == key), None)


class GPUTensor(DeviceTensor):
    """A GPU backend's ``DeviceTensor``: an output kept in ``device``'s memory for the next delegate
    of the same backend, stored as ``stored`` there (half under precision=fp16)."""

    device: object = None

    @property
    def stored(self) -> np.dtype:
        raise NotImplementedError

    @property
    def stored_bytes(self) -> int:
        return math.prod(self.shape) * self.stored.itemsize


@dataclass
class Specialized:
    """A plan specialized to one input signature: its buffers placed and its launches bound."""

    inputs: list[int]
    outputs: list[int]
    buffers: dict[int, object]  # every value id → its buffer (aliases share one)
    launches: list  # and, for a plan with If / Loop, the control items of ``gpu.control``
    shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    own: list = field(default_factory=list)  # buffers and int tables this specialization allocated
    control: bool = False  # whether ``launches`` holds control items (run by ``gpu.control.run``)


@dataclass
class Handle:
    """One delegate ready to run: its device, plan, weights on the device, specializations."""

    device: object  # the backend's device; ``device.allocator.alloc(nbytes)`` gives a buffer
    plan: dict
    dtypes: dict[int, np.dtype]
    storage: dict[int, np.dtype]  # device dtype of inputs and outputs where it differs (fp16)
    host: dict[int, np.ndarray]  # the weights on the host, by value id
    weights: dict[int, object]  # their device buffers, uploaded once, shared by every specialization
    specializations: Specializations
    lock: threading.Lock = field(default_factory=threading.Lock)  # one run at a time per handle
    fp32: Fp32Rerun | None = None  # fp16_check (``gpu/precision.py``)


class GPURuntime(BackendRuntime):
    """The runtime half of a GPU backend, less its device hooks (the methods that raise
    ``NotImplementedError`` below, and ``is_available``; ``devices`` says what it would run on)."""

    thread_safe = True  # each handle runs one call at a time under its own lock
    device_tensors = True  # outputs read only by delegates of this backend on one device stay there

    # -- what a backend declares --
    tensor_type: type[GPUTensor] = GPUTensor  # its device tensors (``execute_device``)
    launch_types: tuple[type, ...] = ()  # its launch records (``bind`` gets those, not control items)
    import_error: str = ""  # why its device library is not importable ("" when it is)
    # Driver exceptions that become KernelError("<name> backend: <type>: <message>"): raised while
    # launching or copying outputs out (``launch_errors``), or anywhere in a call, specializing and
    # copying inputs in included (``call_errors``).
    launch_errors: tuple[type[BaseException], ...] = ()
    call_errors: tuple[type[BaseException], ...] = ()
    timed_copies = False  # whether a profiled run times the copies in and out on the host (they block)

    # -- device hooks: the device, a handle, a builder --
    def unpack(self, processed: bytes) -> tuple[dict, object]:
        """The plan of a blob (checked by ``gpu.plan.parse``), and what the blob stores beside it."""
        return parse(processed, self.name), None

    def open_device(self, compile_specs: list[CompileSpec]) -> object:
        """The device the ``device`` spec names (or the default one)."""
        raise NotImplementedError

    def new_handle(self, compile_specs: list[CompileSpec], stored: object, **fields) -> Handle:
        """The backend's handle from the shared ``fields``, with what it keeps of its own (a stream,
        the blob's ``stored`` binaries, spec values)."""
        return Handle(**fields)

    def on_device(self, handle: Handle) -> contextlib.AbstractContextManager:
        """Entered around init's uploads and each call (a current device and stream, say)."""
        return contextlib.nullcontext()

    def synchronize(self, handle: Handle) -> None:
        """Wait until everything enqueued for ``handle`` is done."""
        raise NotImplementedError

    def builder(self, handle: Handle, host: dict[int, np.ndarray], shapes: dict) -> PlanValues:
        """The backend's ``gpu.api.Builder`` over ``handle.plan`` for inputs of ``shapes``."""
        raise NotImplementedError

    def new_specialization(self, handle: Handle, b: PlanValues, **fields) -> Specialized:
        """The backend's specialization record from the shared ``fields`` (``b``: its builder)."""
        return Specialized(**fields)

    # -- device hooks: memory --
    def upload(self, handle: Handle, buffer, array: np.ndarray, dtype: np.dtype, storage: np.dtype) -> None:
        """``array`` (as ``dtype``) into ``buffer``, stored as ``storage`` (float32 → half under fp16)."""
        raise NotImplementedError

    def table(self, handle: Handle, values: list[int]) -> object:
        """A device buffer holding ``values`` as int32 (at least one element)."""
        raise NotImplementedError

    def bind(self, handle: Handle, spec: Specialized, launch, args: list) -> None:
        """Bind a launch record's arguments, as device objects: ``args`` (buffers, tables, scalars)."""
        raise NotImplementedError

    def copy_in(self, handle: Handle, spec: Specialized, k: int, x: np.ndarray) -> None:
        """Host array ``x`` into the buffer of input ``k`` (converted to its device dtype)."""
        raise NotImplementedError

    def copy_tensor(self, handle: Handle, spec: Specialized, k: int, x: GPUTensor) -> None:
        """A device tensor of this backend, stored alike, into the buffer of input ``k``."""
        raise NotImplementedError

    def copy_out(self, handle: Handle, spec: Specialized, keep: list[bool] | None) -> list:
        """The outputs: output k as a device tensor of its own when ``keep[k]``, else as a host
        array; every copy done on return."""
        raise NotImplementedError

    def free(self, buffer) -> None:
        """Give a buffer back (a backend whose buffers go with their last reference does nothing)."""

    # -- device hooks: launches --
    def enqueue(self, handle: Handle, launch) -> None:
        """Enqueue one launch record (a kernel or a library call)."""
        raise NotImplementedError

    def launch(self, handle: Handle, spec: Specialized) -> None:
        """Enqueue a specialization's launches (it has no control items), in order."""
        for item in spec.launches:
            self.enqueue(handle, item)

    def launch_profiled(self, handle: Handle, spec: Specialized, run) -> None:
        """``launch``, each launch's device time an event of ``run`` (``offload.profile``)."""
        raise NotImplementedError

    def copy_buffer(
        self, handle: Handle, spec: Specialized, src: int, dst: int, nbytes: int, offset: int
    ) -> None:
        """``nbytes`` from value ``src``'s buffer into value ``dst``'s at byte ``offset`` (in order)."""
        raise NotImplementedError

    def read_condition(self, handle: Handle, spec: Specialized, v: int) -> bool:
        """The first byte of value ``v``'s buffer as a truth value, once what was enqueued is done."""
        raise NotImplementedError

    def write_value(self, handle: Handle, spec: Specialized, v: int, value: np.ndarray) -> None:
        """A host value into value ``v``'s buffer (in order with the launches)."""
        raise NotImplementedError

    def fence(self, handle: Handle):
        """A marker after what is enqueued so far: returns the call that waits for it (the device
        loop bounds how far the host runs ahead, and checks a run's deadline, by it)."""
        raise NotImplementedError

    # -- the shared runtime half --
    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        if self.import_error:
            raise OffloadError(f"{self.name} backend: {self.import_error}")
        plan, stored = self.unpack(processed)
        handle = self._init(plan, stored, compile_specs, weights)
        handle.fp32 = Fp32Rerun.wanted(
            self.name,
            plan,
            compile_specs,
            lambda plan, specs: self._init(plan, stored, specs, weights),
        )
        return handle

    def _init(
        self, plan: dict, stored: object, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]
    ) -> Handle:
        host = host_weights(plan, weights, self.name)
        device = self.open_device(compile_specs)
        values = PlanValues(plan, {})
        ends = (*plan["inputs"], *plan["outputs"])
        storage = {i: values.storage(i) for i in ends if values.storage(i) != values.dtypes[i]}
        cache = Specializations(max_shapes(compile_specs, self.name), self.release)
        handle = self.new_handle(
            compile_specs,
            stored,
            device=device,
            plan=plan,
            dtypes=values.dtypes,
            storage=storage,
            host=host,
            weights={},
            specializations=cache,
        )
        with self.on_device(handle):
            for i, w in host.items():  # uploaded once; float32 → half under fp16
                handle.weights[i] = device.allocator.alloc(max(values.nbytes(i), 4))
                self.upload(handle, handle.weights[i], w, values.dtypes[i], values.storage(i))
            for shapes in planned_shapes(plan, compile_specs, self.name):
                cache.get(shapes, lambda shapes=shapes: self._specialize(handle, list(shapes)))
            self.synchronize(handle)
        return handle

    def _specialize(self, handle: Handle, inputs: list) -> Specialized:
        """The plan's launches recorded for these inputs (arrays, or shapes), buffers placed, args
        bound (under ``on_device``)."""
        plan = handle.plan
        shapes = input_shapes(plan, inputs, self.name)
        b = self.builder(handle, {**handle.host, **host_values(plan, inputs)}, shapes)
        ins, outs, pinned = b.record(plan)
        buffers = b.place(pinned, given=handle.weights)
        shared = {id(x) for x in handle.weights.values()}  # a view of a weight holds its buffer
        own = list({id(x): x for x in buffers.values() if id(x) not in shared}.values())
        for i, w in b.host.items():  # folded shape values and host inputs (weights are uploaded)
            if i not in handle.weights:
                self.upload(handle, buffers[i], w, b.dtypes[i], b.storage(i))
        spec = self.new_specialization(
            handle,
            b,
            inputs=ins,
            outputs=outs,
            buffers=buffers,
            launches=b.launches,
            shapes=b.shapes,
            own=own,
            control=control.has_control(b.launches),
        )
        for launch in b.launches:
            if not isinstance(launch, self.launch_types):
                continue  # a control item
            args = []
            for a in launch.args:
                if isinstance(a, Buf):
                    args.append(buffers[a.id])
                elif isinstance(a, Ints):
                    table = self.table(handle, a.values)
                    spec.own.append(table)
                    args.append(table)
                else:
                    args.append(a)
            self.bind(handle, spec, launch, args)
        return spec

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self._execute(handle, [np.asarray(x) for x in inputs], None)

    def execute_device(self, handle: Handle, inputs: list, keep: list[bool]) -> list:
        """Inputs that are this backend's device tensors on the handle's device are copied buffer
        to buffer (another device's or backend's come through the host); kept outputs are copies
        that they own (complete when ``execute_device`` returns)."""
        inputs = resident_inputs(handle.plan, inputs, self.tensor_type, handle.device)
        return self._execute(handle, inputs, keep if self.keeps_on_device(handle) else None)

    def keeps_on_device(self, handle: Handle) -> bool:
        return handle.fp32 is None  # the fp16 guard reads every output on the host

    def _execute(self, handle: Handle, inputs: list, keep: list[bool] | None) -> list:
        try:
            with control.held(handle.lock, run_options.get(), f"{self.name} backend"), self.on_device(handle):
                key = signature(handle.plan, inputs)
                spec = handle.specializations.get(key, lambda: self._specialize(handle, self._shapes(inputs)))
                run = profile.active()
                self._copy_inputs(handle, spec, inputs, run)
                try:
                    if run is not None and not spec.control:
                        self.launch_profiled(handle, spec, run)
                    elif spec.control:
                        self._run_control(handle, spec)
                    else:
                        self.launch(handle, spec)
                    started = profile.now() if run is not None else 0
                    outputs = self.copy_out(handle, spec, keep)
                    if run is not None and self.timed_copies:
                        host = sum(x.nbytes for x in outputs if not isinstance(x, DeviceTensor))
                        run.add("copy to host", "copy", started, profile.now(), bytes=host)
                except self.launch_errors as e:
                    raise self._kernel_error(e) from e
        except self.call_errors as e:
            raise self._kernel_error(e) from e
        if handle.fp32 is None:
            return outputs
        return handle.fp32.checked(outputs, inputs, lambda h, xs: self.execute(h, on_host(xs)))

    def _kernel_error(self, e: BaseException) -> KernelError:
        return KernelError(f"{self.name} backend: {type(e).__name__}: {e}")

    def _shapes(self, inputs: list) -> list:
        """What ``_specialize`` plans for: arrays as they are, device tensors by their shapes."""
        return [tuple(x.shape) if isinstance(x, self.tensor_type) else x for x in inputs]

    def _copy_inputs(self, handle: Handle, spec: Specialized, inputs: list, run) -> None:
        started = profile.now() if run is not None else 0
        moved = on_device = 0
        for k, (i, x) in enumerate(zip(spec.inputs, inputs)):
            if x.dtype != handle.dtypes[i]:
                raise DTypeError(f"{self.name} backend: input {i} is {x.dtype}, expected {handle.dtypes[i]}")
            if isinstance(x, self.tensor_type) and x.stored == handle.storage.get(i, handle.dtypes[i]):
                if x.stored_bytes:
                    self.copy_tensor(handle, spec, k, x)
                on_device += x.stored_bytes
                continue
            x = x.to_host() if isinstance(x, self.tensor_type) else x
            self.copy_in(handle, spec, k, x)
            moved += x.nbytes
        if run is not None and self.timed_copies:
            run.add("copy to device", "copy", started, profile.now(), bytes=moved)
            if on_device:
                run.add("copy on device", "copy", started, profile.now(), bytes=on_device)

    def _run_control(self, handle: Handle, spec: Specialized) -> None:
        """A specialization with If / Loop: its items interpreted, conditions read as they come."""
        control.run(
            spec.launches,
            lambda item: self.enqueue(handle, item),
            lambda src, dst, nbytes, offset: self.copy_buffer(handle, spec, src, dst, nbytes, offset),
            lambda v: self.read_condition(handle, spec, v),
            lambda v, value: self.write_value(handle, spec, v, value),
            lambda: self.fence(handle),
            run_options.get(),
            f"{self.name} backend",
        )

    def describe(self, handle: Handle) -> str:
        return describe(handle.plan, handle.specializations)

    def release(self, spec: Specialized) -> None:
        """Free what a specialization holds (evicted from the cache, or at ``destroy``)."""
        for buffer in spec.own:
            self.free(buffer)
        spec.own.clear()
        spec.buffers.clear()
        spec.launches.clear()

    def destroy(self, handle: Handle) -> None:
        if handle.fp32 is not None and handle.fp32.handle is not None:
            self.destroy(handle.fp32.handle)
            handle.fp32.handle = None
        with handle.lock:
            handle.specializations.clear()
            for buffer in handle.weights.values():
                self.free(buffer)
            handle.weights.clear()
