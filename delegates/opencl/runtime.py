"""The runtime half of the `opencl` backend: ``GPURuntime``'s device hooks over pyopencl.

It imports nothing from ``compiler.py``. ``gpu/runtime.py`` does the rest: weights uploaded once at
init; for each input signature (``gpu/specialize.py``; a static plan has one, built at init) every
plan step's launcher (``gpu.ops``) records its launches through ``CLBuilder``; then intermediate
buffers are assigned from a pool by lifetime (a buffer is reused once the last launch reading its
value has been enqueued) and every kernel's arguments are bound once (``set_args``), so ``execute``
only finds its specialization, copies inputs in, enqueues and copies outputs out. Intermediates
never leave the device. The inputs' copies are enqueued without waiting (in order with the
launches on the one queue); the outputs' blocking reads are where a call waits for the device,
once for a call with one output (a profiled call waits for each copy, to time it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from offload import profile
from offload.errors import OffloadError

from ..backend import Availability, CompileSpec
from ..gpu.api import Buf, Ints, Scratch, source
from ..gpu.builder import PlanValues
from ..gpu.runtime import GPURuntime, GPUTensor, Handle, Specialized, compile_spec
from .device import (
    IMPORT_ERROR,
    Device,
    OpenCLBuildError,
    all_devices,
    build,
    choose,
    cl,
    cl_array,
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


class CLTensor(GPUTensor):
    """A tensor in an OpenCL buffer on ``device``, from byte ``offset``: an output kept for the next
    delegate on the same device, or a caller's ``pyopencl.array.Array`` taken as it is
    (``OpenCLRuntime.adopt``). ``storage`` is its dtype in device memory where that differs (half
    under precision=fp16)."""

    backend = "opencl"

    def __init__(
        self, buffer, shape: tuple, dtype: np.dtype, storage: np.dtype | None, device: Device, offset: int = 0
    ):
        self.buffer, self.shape, self.dtype, self.storage, self.device = buffer, shape, dtype, storage, device
        self.offset = offset

    @property
    def stored(self) -> np.dtype:
        return self.storage or self.dtype

    def to_host(self) -> np.ndarray:
        return self.device.allocator.copyout(self.buffer, self.shape, self.dtype, self.storage, self.offset)

    def as_array(self):
        """A ``pyopencl.array.Array`` on the device's queue over this buffer, or over a float32
        copy made on the device (``convert.cl``) when it is stored as half."""
        queue = self.device.queue
        if self.storage is None:
            return cl_array.Array(queue, self.shape, self.dtype, data=self.buffer, offset=self.offset)
        n = math.prod(self.shape)
        out = cl_array.empty(queue, self.shape, self.dtype)
        if n:
            program = build(self.device, source("convert.cl"), "-DOFFLOAD_FP16")
            half = self.buffer if not self.offset else self.buffer.get_sub_region(self.offset, n * 2)
            kernel = cl.Kernel(program, "to_float")
            kernel.set_args(half, out.data, np.int64(n))
            cl.enqueue_nd_range_kernel(queue, kernel, (n,), None)
        return out


@dataclass
class CLHandle(Handle):
    tuning: str = "none"  # compile spec tuning: how GEMM variants are chosen (``CLBuilder.tuned``)
    # the events of a call's input copies, enqueued without waiting: kept until its outputs are
    # copied out (a blocking read on the same in-order queue), so a call waits for the device once
    pending: list = field(default_factory=list)


class CLBuilder(PlanValues):
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


class OpenCLRuntime(GPURuntime):
    name = "opencl"
    tensor_type = CLTensor
    launch_types = (Launch,)
    import_error = IMPORT_ERROR
    launch_errors = (cl.Error,) if cl is not None else ()
    timed_copies = True  # a profiled call's copies block: their host time is their time

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

    # -- the device, a handle, a builder --
    def open_device(self, compile_specs: list[CompileSpec]) -> Device:
        spec = compile_spec(compile_specs, "device")
        return device_for(spec.text() if spec is not None else None)

    def new_handle(self, compile_specs: list[CompileSpec], stored, **fields) -> CLHandle:
        tuning = compile_spec(compile_specs, "tuning")
        return CLHandle(**fields, tuning=tuning.text() if tuning is not None else "none")

    def synchronize(self, handle: CLHandle) -> None:
        handle.device.queue.finish()
        handle.device.allocator.traffic.syncs += 1

    def builder(self, handle: CLHandle, host: dict[int, np.ndarray], shapes: dict) -> CLBuilder:
        return CLBuilder(handle.device, handle.plan, host, handle.tuning, shapes)

    # -- memory --
    def upload(self, handle: CLHandle, buffer, array: np.ndarray, dtype, storage) -> None:
        handle.device.allocator.copyin(buffer, np.asarray(array, dtype), storage)

    def table(self, handle: CLHandle, values: list[int]):
        alloc = handle.device.allocator
        table = alloc.alloc(4 * max(len(values), 1))
        alloc.copyin(table, np.asarray(values, np.int32))
        return table

    def bind(self, handle: CLHandle, spec: Specialized, launch: Launch, args: list) -> None:
        launch.kernel.set_args(*args)

    def copy_in(self, handle: CLHandle, spec: Specialized, k: int, x: np.ndarray) -> None:
        i = spec.inputs[k]
        # a profiled call waits for each copy, so that its time is the copy's
        wait = profile.active() is not None
        event = handle.device.allocator.copyin(spec.buffers[i], x, handle.storage.get(i), wait=wait)
        if event is not None:
            handle.pending.append(event)

    def copy_tensor(self, handle: CLHandle, spec: Specialized, k: int, x: CLTensor) -> None:
        queue = handle.device.queue
        cl.enqueue_copy(
            queue, spec.buffers[spec.inputs[k]], x.buffer, byte_count=x.stored_bytes, src_offset=x.offset
        )

    def adopt(self, handle: CLHandle, array) -> CLTensor | None:
        """A C-contiguous ``pyopencl.array.Array`` in the handle's context, as it is: the
        commands that write it (its events, its queue) are waited for first."""
        if cl_array is None or not isinstance(array, cl_array.Array):
            return None
        device = handle.device
        if array.context != device.context or not array.flags.c_contiguous:
            return None
        array.finish()
        if array.queue is not None and array.queue != device.queue:
            array.queue.finish()
        return CLTensor(array.base_data, tuple(array.shape), array.dtype, None, device, int(array.offset))

    def array_device(self, handle: CLHandle):
        return handle.device.queue

    def copy_out(self, handle: CLHandle, spec: Specialized, keep: list[bool] | None) -> list:
        alloc = handle.device.allocator
        try:
            return [
                self._kept(handle, spec, i)
                if keep and keep[k]
                else alloc.copyout(spec.buffers[i], spec.shapes[i], handle.dtypes[i], handle.storage.get(i))
                for k, i in enumerate(spec.outputs)
            ]
        finally:
            handle.pending.clear()  # each event waits for its copy (done by now after a read)

    @staticmethod
    def _kept(handle: CLHandle, spec: Specialized, i: int) -> CLTensor:
        """Output ``i`` copied into a buffer of its own (the specialization's is reused next run)."""
        storage = handle.storage.get(i)
        shape = spec.shapes[i]
        n = math.prod(shape) * (storage or handle.dtypes[i]).itemsize
        buffer = handle.device.allocator.alloc(n)
        if n:
            cl.enqueue_copy(handle.device.queue, buffer, spec.buffers[i], byte_count=n)
        return CLTensor(buffer, tuple(shape), handle.dtypes[i], storage, handle.device)

    def free(self, buffer) -> None:
        buffer.release()

    # -- launches --
    def enqueue(self, handle: CLHandle, launch: Launch) -> None:
        cl.enqueue_nd_range_kernel(handle.device.queue, launch.kernel, launch.global_size, launch.local_size)
        handle.device.allocator.traffic.launches += 1

    def launch_profiled(self, handle: CLHandle, spec: Specialized, run) -> None:
        """The launches on the device's profiling queue, each kernel's device time an event of
        ``run`` (placed on the host clock from the first launch's enqueue)."""
        device = handle.device
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
        device.allocator.traffic.launches += len(events)
        if not events:
            return
        origin = events[0][1].profile.queued
        track = f"opencl {device.device.name}"
        for name, event in events:
            start, end = event.profile.start - origin, event.profile.end - origin
            run.add(name, "device", host_start + start, host_start + end, track=track)

    def copy_buffer(
        self, handle: CLHandle, spec: Specialized, src: int, dst: int, nbytes: int, offset: int
    ) -> None:
        buffers = spec.buffers
        cl.enqueue_copy(handle.device.queue, buffers[dst], buffers[src], byte_count=nbytes, dst_offset=offset)

    def read_condition(self, handle: CLHandle, spec: Specialized, v: int) -> bool:
        flag = np.zeros(1, np.uint8)
        cl.enqueue_copy(handle.device.queue, flag, spec.buffers[v], is_blocking=True)
        handle.device.allocator.traffic.syncs += 1
        handle.device.allocator.traffic.to_host += 1
        return bool(flag[0])

    def write_value(self, handle: CLHandle, spec: Specialized, v: int, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        cl.enqueue_copy(handle.device.queue, spec.buffers[v], value, is_blocking=True)
        handle.device.allocator.traffic.syncs += 1
        handle.device.allocator.traffic.to_device += value.nbytes

    def fence(self, handle: CLHandle):
        return cl.enqueue_marker(handle.device.queue).wait
