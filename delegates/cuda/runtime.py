"""The runtime half of the `cuda` backend: a blob → kernels loaded, buffers placed, launches bound.

It imports nothing from ``compiler.py``. At init the weights are uploaded once; for each input
signature (``gpu/specialize.py``; a static plan has one, built at init) every plan step's
launcher (``gpu.ops``) records its launches through ``CUDABuilder`` (GEMMs as cuBLAS calls through ``cupy.matmul``); buffers are
placed by lifetime as the OpenCL runtime places them, weights and int tables uploaded once. Each
handle has its own stream and pinned host buffers for its inputs and outputs, so ``execute``
copies in, launches and copies out on that stream only.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from offload import profile
from offload.errors import DTypeError, KernelError, OffloadError

from ..backend import Availability, BackendRuntime, CompileSpec, DeviceTensor, on_host, run_options
from ..gpu.api import Buf, Ints, Scratch, storage_dtype
from ..gpu.builder import PlanValues, host_weights
from ..gpu.control import has_control, held, run
from ..gpu.ops.linalg import GemmCall
from ..gpu.plan import parse
from ..gpu.precision import Fp32Rerun, flag_spec
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
from . import blob
from .device import IMPORT_ERROR, MAX_BLOCK, Device, build, cp, device_for, device_names, launch_shape


@dataclass
class Launch:
    """One kernel with its launch shape and arguments (bound to device arrays at the end of init)."""

    kernel: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: list  # as recorded: ``Buf`` (placed value or step buffer), ``Ints``, scalars
    bound: tuple = ()  # the same, as device arrays and scalars

    def run(self, stream) -> None:
        self.kernel(self.grid, self.block, self.bound, stream=stream)


@dataclass
class Gemm:
    """One GEMM call through cuBLAS on strided views of the plan's buffers."""

    call: GemmCall
    args: list  # the Bufs it reads and writes, for buffer placement
    storage: str = "float32"  # the operands' dtype on the device: "float16" under precision=fp16

    def bind(self, buffers, view) -> None:
        g, t = self.call, self.storage
        self.a = view(buffers[g.a], (g.M, g.K), t, g.a_off, (g.sam, g.sak))
        self.b = view(buffers[g.b], (g.K, g.N), t, g.b_off, (g.sbk, g.sbn))
        self.c = view(buffers[g.c], (g.M, g.N), t, g.c_off, (g.N, 1))
        # Kept when beta is 0, as matmul.cl keeps it: 0 * inf is NaN there too.
        bias = g.bias is not None
        self.bias = view(buffers[g.bias], (g.M, g.N), t, 0, (g.scm, g.scn)) if bias else None

    def run(self, stream) -> None:  # on the current stream, which execute sets
        # On float16 views CuPy's matmul calls cublasGemmEx with CUBLAS_COMPUTE_32F (its default
        # compute type for half): products and sums in float32, C rounded to half once.
        cp.matmul(self.a, self.b, out=self.c)
        alpha, beta = np.float32(self.call.alpha), np.float32(self.call.beta)
        if self.storage == "float16":
            if alpha != 1.0 or self.bias is not None:
                # the epilogue in float32, rounded to half once more (matmul.cl rounds once: C
                # here differs from it by at most that first rounding of the product)
                r = self.c.astype(np.float32) * alpha
                if self.bias is not None:
                    r += self.bias.astype(np.float32) * beta
                self.c[...] = r  # float32 → half: CuPy rounds to nearest even
            return
        if alpha != 1.0:
            self.c *= alpha
        if self.bias is not None:
            self.c += self.bias * beta


def _shapes(inputs: list) -> list:
    """What ``_specialize`` plans for: arrays as they are, device tensors by their shapes."""
    return [tuple(x.shape) if isinstance(x, CUDATensor) else x for x in inputs]


class CUDATensor(DeviceTensor):
    """An output kept in a CuPy array for the next delegate on the same device, in its device
    dtype (half under precision=fp16)."""

    backend = "cuda"

    def __init__(self, array, dtype, device: Device):
        self.array, self.shape, self.dtype, self.device = array, tuple(array.shape), np.dtype(dtype), device

    def to_host(self) -> np.ndarray:
        with self.device.device:
            return cp.asnumpy(self.array).astype(self.dtype, copy=False)


@dataclass
class Specialized:
    """A plan specialized to one input signature: buffers placed, launches bound, pinned host
    buffers (device dtype) for its inputs and outputs."""

    inputs: list[int]
    outputs: list[int]
    buffers: dict[int, object]  # every value id → its device buffer (aliases share one)
    launches: list
    host_in: list = field(default_factory=list)
    host_out: list = field(default_factory=list)
    keep: list = field(default_factory=list)  # int tables the launches use
    control: bool = False  # whether ``launches`` holds If / Loop items (run by ``gpu.control.run``)
    graph: object = None  # graphs and cuBLAS calls of ``launches`` (spec graph=1); False: not capturable


@dataclass
class Handle:
    device: Device
    stream: object
    plan: dict
    dtypes: dict[int, np.dtype]
    binaries: object
    host: dict[int, np.ndarray]  # the weights on the host, by value id
    weights: dict[int, object]  # their device buffers, uploaded once, shared by every specialization
    specializations: Specializations
    lock: threading.Lock = field(default_factory=threading.Lock)  # one run at a time per handle
    fp32: Fp32Rerun | None = None  # fp16_check (``gpu/precision.py``)
    graphs: bool = True  # compile spec graph (1, the default): replay each specialization as CUDA graphs


class CUDABuilder(PlanValues):
    """The ``gpu.api.Builder`` of the CUDA runtime (one per init): CUDA modules, grid/block
    launches and cuBLAS GEMMs."""

    backend = "cuda"
    max_local_size = MAX_BLOCK

    def __init__(self, device: Device, plan: dict, host: dict[int, np.ndarray], binaries, inputs=None):
        super().__init__(plan, host, inputs)
        self.device, self.binaries = device, binaries
        self.launches: list = []

    def program(self, source: str, options: str = ""):
        self.check_options(options)
        return build(self.device, source, options, self.binaries)

    def launch(self, program, kernel: str, global_size, local_size, args: list) -> None:
        if math.prod(global_size) == 0:
            return
        grid, block = launch_shape(global_size, local_size)
        self.launches.append(Launch(program.get_function(kernel), grid, block, [self.ref(a) for a in args]))

    def gemm(self, call: GemmCall) -> None:
        """Record a cuBLAS GEMM; operands are value ids or a step's ``Scratch`` (im2col columns)."""
        if call.M * call.N == 0:
            return

        def ref(x):
            return self.ref(x if isinstance(x, Scratch) else Buf(x)).id

        bias = ref(call.bias) if call.bias is not None else None
        call = replace(call, a=ref(call.a), b=ref(call.b), c=ref(call.c), bias=bias)
        ids = [call.a, call.b, call.c] + ([call.bias] if call.bias is not None else [])
        self.launches.append(
            Gemm(call, [Buf(i) for i in ids], storage_dtype(np.float32, self.precision).name)
        )


def _spec(specs: list[CompileSpec], key: str) -> CompileSpec | None:
    return next((s for s in specs if s.key == key), None)


class CUDARuntime(BackendRuntime):
    name = "cuda"
    thread_safe = True  # each handle runs one call at a time under its own lock
    device_tensors = True  # outputs read only by cuda delegates on this device stay in its memory

    def is_available(self) -> Availability:
        if cp is None:
            return Availability(False, IMPORT_ERROR)
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as e:  # CUDARuntimeError: no driver, or a driver older than CuPy's CUDA
            return Availability(False, f"no CUDA driver: {e}")
        if count == 0:
            return Availability(False, "no CUDA device")
        return Availability(True)

    def devices(self) -> list[str]:
        return device_names()

    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        if cp is None:
            raise OffloadError(f"cuda backend: {IMPORT_ERROR}")
        plan, binaries = blob.unpack(processed)
        plan = parse(plan, "cuda")  # a damaged plan: ModelFormatError, not a crash
        handle = self._init(plan, binaries, compile_specs, weights)
        handle.fp32 = Fp32Rerun.wanted(
            "cuda", plan, compile_specs, lambda plan, specs: self._init(plan, binaries, specs, weights)
        )
        return handle

    def _init(
        self, plan: dict, binaries, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]
    ):
        host = host_weights(plan, weights, "cuda")
        spec = _spec(compile_specs, "device")
        device = device_for(spec.integer() if spec is not None else 0)
        with device.device:
            # Every upload of init goes on the handle's stream, which does not wait for the
            # legacy default stream.
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                values = PlanValues(plan, {})
                buffers = {}
                for i, w in host.items():  # float32 → half under fp16 (nearest even, ±inf past 65504)
                    buffers[i] = device.allocator.alloc(max(values.nbytes(i), 4))
                    _upload(device, buffers[i], w, values.dtypes[i], values.storage(i), stream)
                cache = Specializations(max_shapes(compile_specs, "cuda"), _release)
                handle = Handle(device, stream, plan, values.dtypes, binaries, host, buffers, cache)
                handle.graphs = flag_spec(compile_specs, "graph", True, "cuda")
                for shapes in planned_shapes(plan, compile_specs, "cuda"):
                    cache.get(shapes, lambda shapes=shapes: self._specialize(handle, list(shapes)))
            stream.synchronize()
        return handle

    def _specialize(self, handle: Handle, inputs: list) -> Specialized:
        """The plan's launches recorded for these inputs (arrays, or shapes), buffers placed, args
        bound; runs on the handle's device and stream."""
        plan, device = handle.plan, handle.device
        shapes = input_shapes(plan, inputs, "cuda")
        b = CUDABuilder(device, plan, {**handle.host, **host_values(plan, inputs)}, handle.binaries, shapes)
        ins, outs, pinned = b.record(plan)
        buffers = b.place(pinned, given=handle.weights)
        alloc = device.allocator
        for i, w in b.host.items():  # folded shape values and host inputs (weights are uploaded)
            if i not in handle.weights:
                _upload(device, buffers[i], w, b.dtypes[i], b.storage(i), handle.stream)
        spec = Specialized(ins, outs, buffers, b.launches, control=has_control(b.launches))
        for launch in b.launches:
            if not isinstance(launch, Launch | Gemm):
                continue
            if isinstance(launch, Gemm):
                launch.bind(buffers, alloc.view)
                continue
            bound = []
            for a in launch.args:
                if isinstance(a, Buf):
                    bound.append(buffers[a.id])
                elif isinstance(a, Ints):
                    table = cp.asarray(np.asarray(a.values, np.int32) if a.values else np.zeros(1, np.int32))
                    spec.keep.append(table)
                    bound.append(table)
                else:
                    bound.append(a)
            launch.bound = tuple(bound)
        # The caller's float32 is converted to / from half on the host, in the pinned buffers.
        spec.host_in = [alloc.pinned(b.shapes[i], b.storage(i)) for i in ins]
        spec.host_out = [alloc.pinned(b.shapes[i], b.storage(i)) for i in outs]
        return spec

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self._execute(handle, [np.asarray(x) for x in inputs], None)

    def execute_device(self, handle: Handle, inputs: list, keep: list[bool]) -> list:
        """Inputs that are this device's ``CUDATensor``s are copied array to array on the handle's
        stream (another device's or backend's come through the host); kept outputs are copies
        that they own (the producer synchronized its stream before returning them)."""
        inputs = resident_inputs(handle.plan, inputs, CUDATensor, handle.device)
        return self._execute(handle, inputs, keep if self.keeps_on_device(handle) else None)

    def keeps_on_device(self, handle: Handle) -> bool:
        return handle.fp32 is None  # the fp16 guard reads every output on the host

    def _execute(self, handle: Handle, inputs: list, keep: list[bool] | None) -> list:
        view, stream = handle.device.allocator.view, handle.stream
        try:
            with held(handle.lock, run_options.get(), "cuda backend"), handle.device.device, stream:
                key = signature(handle.plan, inputs)
                spec = handle.specializations.get(key, lambda: self._specialize(handle, _shapes(inputs)))
                for i, x, pinned in zip(spec.inputs, inputs, spec.host_in):
                    if x.dtype != handle.dtypes[i]:
                        raise DTypeError(f"cuda backend: input {i} is {x.dtype}, expected {handle.dtypes[i]}")
                    if isinstance(x, CUDATensor) and x.array.dtype == pinned.dtype:
                        if x.array.size:
                            view(spec.buffers[i], x.shape, pinned.dtype)[...] = x.array
                        continue
                    x = x.to_host() if isinstance(x, CUDATensor) else x
                    if x.size:
                        with np.errstate(over="ignore"):
                            np.copyto(pinned, x, casting="same_kind")
                        view(spec.buffers[i], x.shape, pinned.dtype).set(pinned, stream)
                run = profile.active()
                if run is not None and not spec.control:
                    _launch_profiled(spec, stream, run)
                elif spec.control:
                    _run_control(spec, stream)
                elif handle.graphs and spec.graph is not False:
                    replay(spec, stream)
                else:
                    for launch in spec.launches:
                        launch.run(stream)
                kept = {}
                for k, (i, pinned) in enumerate(zip(spec.outputs, spec.host_out)):
                    if keep and keep[k]:
                        array = view(spec.buffers[i], pinned.shape, pinned.dtype).copy()
                        kept[k] = CUDATensor(array, handle.dtypes[i], handle.device)
                    elif pinned.size:
                        view(spec.buffers[i], pinned.shape, pinned.dtype).get(stream, out=pinned)
                stream.synchronize()
                # Copies: the pinned buffers are refilled by the next call.
                outputs = [
                    kept[k] if k in kept else np.array(p, handle.dtypes[i], copy=True)
                    for k, (i, p) in enumerate(zip(spec.outputs, spec.host_out))
                ]
        except (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) as e:
            raise KernelError(f"cuda backend: {type(e).__name__}: {e}") from e
        if handle.fp32 is None:
            return outputs
        return handle.fp32.checked(outputs, inputs, lambda h, xs: self.execute(h, on_host(xs)))

    def describe(self, handle: Handle) -> str:
        return describe(handle.plan, handle.specializations)

    def destroy(self, handle: Handle) -> None:
        if handle.fp32 is not None and handle.fp32.handle is not None:
            self.destroy(handle.fp32.handle)
            handle.fp32.handle = None
        # CuPy returns the arrays to its pool when the last reference goes.
        with handle.lock:
            handle.specializations.clear()
            handle.weights.clear()


def _upload(device: Device, buffer, w: np.ndarray, dtype, storage, stream) -> None:
    if w.size:
        with np.errstate(over="ignore"):
            w = np.ascontiguousarray(np.asarray(w, dtype).astype(storage))
        device.allocator.view(buffer, w.shape, w.dtype).set(w, stream)


# Specializations captured as CUDA graphs, refused by capture, and graph launches (compile spec
# graph=1); counted per process, like ``device.BUILD_STATS``.
GRAPH_STATS = {"captured": 0, "refused": 0, "replayed": 0}


def _segments(launches: list) -> list:
    """``launches`` in order as runs of kernel launches (a list each, captured as one graph) and
    the cuBLAS calls between them (CuPy refuses a cuBLAS call while a stream captures)."""
    segments: list = []
    for launch in launches:
        if isinstance(launch, Gemm):
            segments.append(launch)
        elif segments and isinstance(segments[-1], list):
            segments[-1].append(launch)
        else:
            segments.append([launch])
    return segments


def replay(spec: Specialized, stream) -> None:
    """The specialization's launches as CUDA graphs: on the first call each run of kernel launches
    between two cuBLAS calls is captured from ``stream`` as one graph (the launches are recorded,
    not run, while capturing); then, on every call, the graphs are launched and the cuBLAS calls
    made in order. A specialization that cannot be captured (a call that allocates or
    synchronizes while capturing) runs launch by launch from then on, with one warning."""
    if spec.graph is None:
        steps = []
        try:
            for segment in _segments(spec.launches):
                if not isinstance(segment, list):
                    steps.append(segment)
                    continue
                stream.begin_capture()
                try:
                    for launch in segment:
                        launch.run(stream)
                finally:
                    steps.append(stream.end_capture())
        except Exception as e:  # whatever capture refuses: nothing ran yet; the launches run one by one
            spec.graph = False
            GRAPH_STATS["refused"] += 1
            warnings.warn(
                f"cuda backend: a specialization could not be captured as a CUDA graph "
                f"({type(e).__name__}: {e}); it runs launch by launch",
                RuntimeWarning,
                stacklevel=5,
            )
            for launch in spec.launches:
                launch.run(stream)
            return
        spec.graph = steps
        GRAPH_STATS["captured"] += 1
    for step in spec.graph:
        if isinstance(step, Gemm):
            step.run(stream)
        else:
            step.launch(stream)
    GRAPH_STATS["replayed"] += 1


def _launch_profiled(spec: Specialized, stream, run) -> None:
    """The launches between CUDA events, each one's device time an event of ``run`` (placed on
    the host clock from the first launch's enqueue)."""
    host_start = profile.now()
    marks = []
    for launch in spec.launches:
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        launch.run(stream)
        end.record(stream)
        name = getattr(getattr(launch, "kernel", None), "name", None) or type(launch).__name__.lower()
        marks.append((name, start, end))
    stream.synchronize()
    if not marks:
        return
    origin = marks[0][1]
    for name, start, end in marks:
        begin = cp.cuda.get_elapsed_time(origin, start) * 1e6  # ms → ns
        length = cp.cuda.get_elapsed_time(start, end) * 1e6
        run.add(name, "device", host_start + int(begin), host_start + int(begin + length), track="cuda")


def _run_control(spec: Specialized, stream) -> None:
    """A specialization with If / Loop: its items interpreted on ``stream`` (the current one),
    conditions read as they come."""
    buffers = spec.buffers

    def copy(src: int, dst: int, nbytes: int, offset: int) -> None:
        buffers[dst][offset : offset + nbytes] = buffers[src][:nbytes]

    def read(v: int) -> bool:
        return bool(buffers[v][:1].get(stream=stream)[0])

    def write(v: int, value: np.ndarray) -> None:
        raw = np.ascontiguousarray(value).view(np.uint8).ravel()
        buffers[v][: raw.size].set(raw, stream=stream)

    def fence():
        event = cp.cuda.Event(disable_timing=True)
        event.record(stream)
        return event.synchronize

    run(
        spec.launches,
        lambda item: item.run(stream),
        copy,
        read,
        write,
        fence,
        run_options.get(),
        "cuda backend",
    )


def _release(spec: Specialized) -> None:
    spec.buffers.clear()
    spec.launches.clear()
    spec.keep.clear()
    spec.host_in.clear()
    spec.host_out.clear()
