"""The runtime half of the `opencl` backend: a plan → kernels built, buffers placed, launches bound.

It imports nothing from ``compiler.py``. At init every plan step's launcher (``gpu.ops``) records
its launches through ``PlanBuilder``; then intermediate buffers are assigned from a pool by
lifetime (a buffer is reused once the last launch reading its value has been enqueued) and every
kernel's arguments are bound once, so ``execute`` only copies inputs in, enqueues and copies
outputs out. Intermediates never leave the device.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from offload.errors import KernelError, OffloadError

from ..backend import Availability, BackendRuntime, CompileSpec
from ..gpu.api import Buf, Ints, Scratch
from ..gpu.builder import PlanValues, host_weights
from ..gpu.plan import parse
from .device import IMPORT_ERROR, Device, OpenCLBuildError, all_devices, build, cl, device_for, tuning_choice

__all__ = ["OpenCLBuildError", "OpenCLRuntime", "build", "device_for"]


@dataclass
class Launch:
    """One kernel with its arguments bound, and its launch shape."""

    kernel: object
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    args: list  # as recorded: value ids are ``Buf``, tables ``Ints``, step buffers ``Scratch``


@dataclass
class Handle:
    device: Device
    inputs: list[int]
    outputs: list[int]
    shapes: dict[int, tuple[int, ...]]
    dtypes: dict[int, np.dtype]
    buffers: dict[int, object]  # every value id → its buffer (aliases share one)
    launches: list[Launch]
    storage: dict[int, np.dtype] = field(default_factory=dict)  # device dtype where it differs (fp16)
    keep: list = field(default_factory=list)  # tables and step buffers the launches use


class PlanBuilder(PlanValues):
    """The ``gpu.api.Builder`` of the OpenCL runtime (one per init): programs built by pyopencl,
    launches recorded with their OpenCL sizes, GEMM variants timed on request."""

    backend = "opencl"

    def __init__(self, device: Device, plan: dict, host: dict[int, np.ndarray], tuning: str = "none"):
        super().__init__(plan, host)
        self.device = device
        self.tuning = tuning
        self.max_local_size = int(device.device.max_work_group_size)
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

    def is_available(self) -> Availability:
        if cl is None:
            return Availability(False, IMPORT_ERROR)
        try:
            devices = all_devices()
        except cl.Error as e:
            return Availability(False, f"no OpenCL platform: {e}")
        if not devices:
            return Availability(False, "no OpenCL platform with a device")
        return Availability(True)

    def devices(self) -> list[str]:
        if cl is None:
            return []
        try:
            return [f"{p}:{d} {dev.name} ({dev.platform.name})" for p, d, dev in all_devices()]
        except cl.Error:
            return []

    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        if cl is None:
            raise OffloadError(f"opencl backend: {IMPORT_ERROR}")
        plan = parse(processed, "opencl")
        host = host_weights(plan, weights, "opencl")
        spec = _spec(compile_specs, "device")
        device = device_for(spec.text() if spec is not None else None)
        tuning = _spec(compile_specs, "tuning")
        b = PlanBuilder(device, plan, host, tuning.text() if tuning is not None else "none")
        inputs, outputs, pinned = b.record(plan)
        buffers = b.place(pinned)
        alloc = device.allocator
        for i, w in host.items():  # float32 → half under fp16
            alloc.copyin(buffers[i], np.asarray(w, b.dtypes[i]), b.storage(i))
        storage = {i: b.storage(i) for i in (*inputs, *outputs) if b.storage(i) != b.dtypes[i]}
        handle = Handle(device, inputs, outputs, b.shapes, b.dtypes, buffers, b.launches, storage=storage)
        for launch in b.launches:
            args = []
            for a in launch.args:
                if isinstance(a, Buf):
                    args.append(buffers[a.id])
                elif isinstance(a, Ints):
                    table = alloc.alloc(4 * max(len(a.values), 1))
                    alloc.copyin(table, np.asarray(a.values, np.int32))
                    handle.keep.append(table)
                    args.append(table)
                else:
                    args.append(a)
            launch.kernel.set_args(*args)
        device.queue.finish()
        return handle

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(handle.inputs):
            raise OffloadError(f"opencl backend: expected {len(handle.inputs)} inputs, got {len(inputs)}")
        alloc = handle.device.allocator
        for i, x in zip(handle.inputs, inputs):
            x = np.asarray(x)
            if x.dtype != handle.dtypes[i] or x.shape != handle.shapes[i]:
                raise OffloadError(
                    f"opencl backend: input {i} is {x.dtype}{list(x.shape)}, "
                    f"expected {handle.dtypes[i]}{list(handle.shapes[i])}"
                )
            alloc.copyin(handle.buffers[i], x, handle.storage.get(i))
        queue = handle.device.queue
        try:
            for launch in handle.launches:
                cl.enqueue_nd_range_kernel(queue, launch.kernel, launch.global_size, launch.local_size)
            return [
                alloc.copyout(handle.buffers[i], handle.shapes[i], handle.dtypes[i], handle.storage.get(i))
                for i in handle.outputs
            ]
        except cl.Error as e:
            raise KernelError(f"opencl backend: {type(e).__name__}: {e}") from e

    def destroy(self, handle: Handle) -> None:
        for buf in {id(b): b for b in handle.buffers.values()}.values():  # aliases share buffers
            buf.release()
        for buf in handle.keep:
            buf.release()
        handle.buffers.clear()
        handle.launches.clear()
        handle.keep.clear()
