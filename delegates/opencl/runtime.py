"""The runtime half of the `opencl` backend: a plan → kernels built, buffers placed, launches bound.

It imports nothing from ``compiler.py``. At init the weights are uploaded once. For each input
signature (``gpu/specialize.py``; a static plan has one, built at init) every plan step's launcher
(``gpu.ops``) records its launches through ``PlanBuilder``; then intermediate buffers are assigned
from a pool by lifetime (a buffer is reused once the last launch reading its value has been
enqueued) and every kernel's arguments are bound once, so ``execute`` only finds its
specialization, copies inputs in, enqueues and copies outputs out. Intermediates never leave the
device.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from offload import profile
from offload.errors import DTypeError, KernelError, OffloadError

from ..backend import Availability, BackendRuntime, CompileSpec, DeviceTensor, on_host, run_options
from ..gpu.api import Buf, Ints, Scratch
from ..gpu.builder import PlanValues, host_weights
from ..gpu.control import has_control, held, run
from ..gpu.plan import parse
from ..gpu.precision import Fp32Rerun
from ..gpu.specialize import (
    Specializations,
    describe,
    host_values,
    input_shapes,
    max_shapes,
    planned_shapes,
    resident_inputs,
    signature,
)
from .device import (
    IMPORT_ERROR,
    Device,
    OpenCLBuildError,
    all_devices,
    build,
    choose,
    cl,
    device_for,
    device_name,
    tuning_choice,
    usable_devices,
)

__all__ = ["OpenCLBuildError", "OpenCLRuntime", "build", "device_for"]


@dataclass
class Launch:
    """One kernel with its arguments bound, and its launch shape."""

    kernel: object
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: list  # as recorded: value ids are ``Buf``, tables ``Ints``, step buffers ``Scratch``


def _shapes(inputs: list) -> list:
    """What ``_specialize`` plans for: arrays as they are, device tensors by their shapes."""
    return [tuple(x.shape) if isinstance(x, CLTensor) else x for x in inputs]


class CLTensor(DeviceTensor):
    """An output kept in an OpenCL buffer for the next delegate on the same device: ``storage``
    is its dtype in device memory where that differs (half under precision=fp16)."""

    backend = "opencl"

    def __init__(self, buffer, shape: tuple, dtype: np.dtype, storage: np.dtype | None, device: Device):
        self.buffer, self.shape, self.dtype, self.storage, self.device = buffer, shape, dtype, storage, device

    @property
    def stored_bytes(self) -> int:
        return math.prod(self.shape) * (self.storage or self.dtype).itemsize

    def to_host(self) -> np.ndarray:
        return self.device.allocator.copyout(self.buffer, self.shape, self.dtype, self.storage)


@dataclass
class Specialized:
    """A plan specialized to one input signature: its buffers placed and its launches bound."""

    inputs: list[int]
    outputs: list[int]
    shapes: dict[int, tuple[int, ...]]
    buffers: dict[int, object]  # every value id → its buffer (aliases share one)
    launches: list[Launch]  # and, for a plan with If / Loop, the control items of ``gpu.control``
    own: list = field(default_factory=list)  # buffers and tables this specialization allocated
    control: bool = False  # whether ``launches`` holds control items (run by ``gpu.control.run``)


@dataclass
class Handle:
    device: Device
    plan: dict
    dtypes: dict[int, np.dtype]
    storage: dict[int, np.dtype]  # device dtype of inputs and outputs where it differs (fp16)
    tuning: str
    host: dict[int, np.ndarray]  # the weights on the host, by value id
    weights: dict[int, object]  # their device buffers, uploaded once, shared by every specialization
    specializations: Specializations
    lock: threading.Lock = field(default_factory=threading.Lock)  # one run at a time per handle
    fp32: Fp32Rerun | None = None  # fp16_check (``gpu/precision.py``)


class PlanBuilder(PlanValues):
    """The ``gpu.api.Builder`` of the OpenCL runtime (one per init): programs built by pyopencl,
    launches recorded with their OpenCL sizes, GEMM variants timed on request."""

    backend = "opencl"

    def __init__(
        self, device: Device, plan: dict, host: dict[int, np.ndarray], tuning: str = "none", inputs=None
    ):
        super().__init__(plan, host, inputs)
        self.device = device
        self.tuning = tuning
        self.max_local_size = int(device.device.max_work_group_size)
        # kernels made for a CPU device (matmul.cl's packed GEMM) where the device is one (PoCL)
        self.device_kind = "cpu" if device.device.type & cl.device_type.CPU else "gpu"
        self.launches: list[Launch] = []

    def program(self, source: str, options: str = ""):
        self.check_options(options)
        return build(self.device, source, options)

    def launch(self, program, kernel: str, global_size, local_size, args: list) -> None:
        if math.prod(global_size) == 0:
            return
        recorded = [self.ref(a) for a in args]
        self.launches.append(Launch(cl.Kernel(program, kernel), tuple(global_size), local_size, recorded))

    def tuned(self, key: str, candidates: list, trial) -> object:
        """The candidate whose ``trial`` (seconds) is smallest, remembered per device and key."""
        return tuning_choice(self.device, key, candidates, trial)

    def time(self, program, kernel: str, global_size, local_size, args: list) -> float:
        """Seconds one launch takes (best of 3), run on scratch buffers of the plan values' sizes."""
        alloc, temps = self.device.allocator, []

        def arg(a):
            if isinstance(a, Buf | Scratch):
                temps.append(
                    alloc.alloc(a.nbytes if isinstance(a, Scratch) else self.nbytes(self.root(a.id)))
                )
                return temps[-1]
            if isinstance(a, Ints):
                temps.append(alloc.alloc(4 * max(len(a.values), 1)))
                alloc.copyin(temps[-1], np.asarray(a.values, np.int32))
                return temps[-1]
            return a

        k = cl.Kernel(program, kernel)
        k.set_args(*[arg(a) for a in args])
        queue, best = self.device.queue, math.inf
        try:
            for _ in range(4):  # the first run warms caches and is not counted
                start = time.perf_counter()
                cl.enqueue_nd_range_kernel(queue, k, tuple(global_size), local_size)
                queue.finish()
                best = min(best, time.perf_counter() - start) if _ else best
        finally:
            for t in temps:
                t.release()
        return best


def _spec(specs: list[CompileSpec], key: str) -> CompileSpec | None:
    return next((s for s in specs if s.key == key), None)


class OpenCLRuntime(BackendRuntime):
    name = "opencl"
    thread_safe = True  # each handle runs one call at a time under its own lock
    device_tensors = True  # outputs read only by opencl delegates on this device stay in buffers

    def is_available(self) -> Availability:
        if cl is None:
            return Availability(False, IMPORT_ERROR)
        try:
            devices = all_devices()
        except cl.Error as e:
            return Availability(False, f"no OpenCL platform: {e}")
        if not devices:
            return Availability(False, "no OpenCL platform with a device")
        good, bad = usable_devices()
        if not good:
            return Availability(False, "no OpenCL device here builds kernels: " + "; ".join(bad))
        return Availability(True)

    def devices(self) -> list[str]:
        """Each device the ICD loader offers; the default one (compile spec ``device`` unset)
        carries ``[default: why]``."""
        if cl is None:
            return []
        try:
            devices = all_devices()
        except cl.Error:
            return []
        try:
            chosen, why = choose(None)
        except OffloadError:
            chosen, why = None, ""
        return [
            f"{p}:{d} {device_name(dev)}" + (f" [default: {why}]" if dev == chosen else "")
            for p, d, dev in devices
        ]

    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        if cl is None:
            raise OffloadError(f"opencl backend: {IMPORT_ERROR}")
        plan = parse(processed, "opencl")
        host = host_weights(plan, weights, "opencl")
        spec = _spec(compile_specs, "device")
        device = device_for(spec.text() if spec is not None else None)
        tuning = _spec(compile_specs, "tuning")
        values = PlanValues(plan, {})
        buffers = {}
        for i, w in host.items():  # uploaded once; float32 → half under fp16
            buffers[i] = device.allocator.alloc(max(values.nbytes(i), 4))
            device.allocator.copyin(buffers[i], np.asarray(w, values.dtypes[i]), values.storage(i))
        ends = (*plan["inputs"], *plan["outputs"])
        storage = {i: values.storage(i) for i in ends if values.storage(i) != values.dtypes[i]}
        cache = Specializations(max_shapes(compile_specs, "opencl"), _release)
        handle = Handle(
            device,
            plan,
            values.dtypes,
            storage,
            tuning.text() if tuning is not None else "none",
            host,
            buffers,
            cache,
        )
        handle.fp32 = Fp32Rerun.wanted(
            "opencl",
            plan,
            compile_specs,
            lambda plan, specs: self.init(json.dumps(plan).encode(), specs, weights),
        )
        for shapes in planned_shapes(plan, compile_specs, "opencl"):
            cache.get(shapes, lambda shapes=shapes: self._specialize(handle, list(shapes)))
        device.queue.finish()
        return handle

    def _specialize(self, handle: Handle, inputs: list) -> Specialized:
        """The plan's launches recorded for these inputs (arrays, or shapes), buffers placed, args bound."""
        plan, device = handle.plan, handle.device
        shapes = input_shapes(plan, inputs, "opencl")
        b = PlanBuilder(device, plan, {**handle.host, **host_values(plan, inputs)}, handle.tuning, shapes)
        ins, outs, pinned = b.record(plan)
        buffers = b.place(pinned, given=handle.weights)
        alloc = device.allocator
        shared = {id(x) for x in handle.weights.values()}  # a view of a weight holds its buffer
        own = list({id(x): x for x in buffers.values() if id(x) not in shared}.values())
        for i, w in b.host.items():  # folded shape values and host inputs (weights are uploaded)
            if i not in handle.weights:
                alloc.copyin(buffers[i], np.asarray(w, b.dtypes[i]), b.storage(i))
        spec = Specialized(ins, outs, b.shapes, buffers, b.launches, own, has_control(b.launches))
        for launch in b.launches:
            if not isinstance(launch, Launch):
                continue
            args = []
            for a in launch.args:
                if isinstance(a, Buf):
                    args.append(buffers[a.id])
                elif isinstance(a, Ints):
                    table = alloc.alloc(4 * max(len(a.values), 1))
                    alloc.copyin(table, np.asarray(a.values, np.int32))
                    spec.own.append(table)
                    args.append(table)
                else:
                    args.append(a)
            launch.kernel.set_args(*args)
        return spec

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self._execute(handle, [np.asarray(x) for x in inputs], None)

    def execute_device(self, handle: Handle, inputs: list, keep: list[bool]) -> list:
        """Inputs that are this device's ``CLTensor``s are copied buffer to buffer (another
        device's or backend's come through the host); kept outputs are copied into buffers of
        their own, which they hold."""
        inputs = resident_inputs(handle.plan, inputs, CLTensor, handle.device)
        return self._execute(handle, inputs, keep if self.keeps_on_device(handle) else None)

    def keeps_on_device(self, handle: Handle) -> bool:
        return handle.fp32 is None  # the fp16 guard reads every output on the host

    def _execute(self, handle: Handle, inputs: list, keep: list[bool] | None) -> list:
        with held(handle.lock, run_options.get(), "opencl backend"):
            key = signature(handle.plan, inputs)
            spec = handle.specializations.get(key, lambda: self._specialize(handle, _shapes(inputs)))
            alloc, queue = handle.device.allocator, handle.device.queue
            run = profile.active()
            started = profile.now() if run is not None else 0
            moved = on_device = 0
            for i, x in zip(spec.inputs, inputs):
                if x.dtype != handle.dtypes[i]:
                    raise DTypeError(f"opencl backend: input {i} is {x.dtype}, expected {handle.dtypes[i]}")
                storage = handle.storage.get(i)
                if isinstance(x, CLTensor) and x.storage == storage:
                    if x.stored_bytes:
                        cl.enqueue_copy(queue, spec.buffers[i], x.buffer, byte_count=x.stored_bytes)
                    on_device += x.stored_bytes
                    continue
                x = x.to_host() if isinstance(x, CLTensor) else x
                alloc.copyin(spec.buffers[i], x, storage)
                moved += x.nbytes
            if run is not None:
                run.add("copy to device", "copy", started, profile.now(), bytes=moved)
                if on_device:
                    run.add("copy on device", "copy", started, profile.now(), bytes=on_device)
            try:
                if run is not None and not spec.control:
                    _launch_profiled(handle.device, spec, run)
                elif spec.control:
                    _run_control(handle.device, spec)
                else:
                    for launch in spec.launches:
                        cl.enqueue_nd_range_kernel(
                            queue, launch.kernel, launch.global_size, launch.local_size
                        )
                started = profile.now() if run is not None else 0
                outputs = [
                    self._kept(handle, spec, i)
                    if keep and keep[k]
                    else alloc.copyout(
                        spec.buffers[i], spec.shapes[i], handle.dtypes[i], handle.storage.get(i)
                    )
                    for k, i in enumerate(spec.outputs)
                ]
                if run is not None:
                    host = sum(x.nbytes for x in outputs if not isinstance(x, CLTensor))
                    run.add("copy to host", "copy", started, profile.now(), bytes=host)
            except cl.Error as e:
                raise KernelError(f"opencl backend: {type(e).__name__}: {e}") from e
        if handle.fp32 is None:
            return outputs
        return handle.fp32.checked(outputs, inputs, lambda h, xs: self.execute(h, on_host(xs)))

    @staticmethod
    def _kept(handle: Handle, spec: Specialized, i: int) -> CLTensor:
        """Output ``i`` copied into a buffer of its own (the specialization's is reused next run)."""
        storage = handle.storage.get(i)
        shape = spec.shapes[i]
        n = math.prod(shape) * (storage or handle.dtypes[i]).itemsize
        buffer = handle.device.allocator.alloc(n)
        if n:
            cl.enqueue_copy(handle.device.queue, buffer, spec.buffers[i], byte_count=n)
        return CLTensor(buffer, tuple(shape), handle.dtypes[i], storage, handle.device)

    def describe(self, handle: Handle) -> str:
        return describe(handle.plan, handle.specializations)

    def destroy(self, handle: Handle) -> None:
        if handle.fp32 is not None and handle.fp32.handle is not None:
            self.destroy(handle.fp32.handle)
            handle.fp32.handle = None
        with handle.lock:
            handle.specializations.clear()
            for buf in handle.weights.values():
                buf.release()
            handle.weights.clear()


def _launch_profiled(device: Device, spec: Specialized, run) -> None:
    """The launches on the device's profiling queue, each kernel's device time an event of
    ``run`` (placed on the host clock from the first launch's enqueue)."""
    device.queue.finish()  # the inputs' copies were enqueued there
    queue = device.profiling_queue
    host_start = profile.now()
    events = [
        (
            launch.kernel.function_name,
            cl.enqueue_nd_range_kernel(queue, launch.kernel, launch.global_size, launch.local_size),
        )
        for launch in spec.launches
    ]
    queue.finish()
    if not events:
        return
    origin = events[0][1].profile.queued
    track = f"opencl {device.device.name}"
    for name, event in events:
        start, end = event.profile.start - origin, event.profile.end - origin
        run.add(name, "device", host_start + start, host_start + end, track=track)


def _run_control(device: Device, spec: Specialized) -> None:
    """A specialization with If / Loop: its items interpreted, conditions read as they come."""
    queue, buffers = device.queue, spec.buffers

    def launch(item: Launch) -> None:
        cl.enqueue_nd_range_kernel(queue, item.kernel, item.global_size, item.local_size)

    def copy(src: int, dst: int, nbytes: int, offset: int) -> None:
        cl.enqueue_copy(queue, buffers[dst], buffers[src], byte_count=nbytes, dst_offset=offset)

    def read(v: int) -> bool:
        flag = np.zeros(1, np.uint8)
        cl.enqueue_copy(queue, flag, buffers[v], is_blocking=True)
        return bool(flag[0])

    def write(v: int, value: np.ndarray) -> None:
        cl.enqueue_copy(queue, buffers[v], np.ascontiguousarray(value), is_blocking=True)

    def fence():
        return cl.enqueue_marker(queue).wait

    run(spec.launches, launch, copy, read, write, fence, run_options.get(), "opencl backend")


def _release(spec: Specialized) -> None:
    for buf in spec.own:
        buf.release()
    spec.own.clear()
    spec.buffers.clear()
    spec.launches.clear()
