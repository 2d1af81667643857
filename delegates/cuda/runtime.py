"""The runtime half of the `cuda` backend: ``GPURuntime``'s device hooks over CuPy.

It imports nothing from ``compiler.py``. ``gpu/runtime.py`` does the rest: weights uploaded once at
init; for each input signature (``gpu/specialize.py``; a static plan has one, built at init) every
plan step's launcher (``gpu.ops``) records its launches through ``CUDABuilder`` (GEMMs as cuBLAS
calls through ``cupy.matmul``); buffers are placed by lifetime as for OpenCL, int tables uploaded
once. Each handle has its own stream and each specialization pinned host buffers for its inputs
and outputs, so ``execute`` copies in, launches (as CUDA graphs under spec graph=1, the default)
and copies out on that stream only, and waits for it once.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from offload import profile

from ..backend import Availability, CompileSpec
from ..gpu.api import Buf, Scratch, storage_dtype
from ..gpu.builder import PlanValues
from ..gpu.ops.linalg import GemmCall
from ..gpu.plan import parse
from ..gpu.precision import flag_spec
from ..gpu.runtime import GPURuntime, GPUTensor, Handle, Specialized, compile_spec
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
        # a batch of GEMMs (a grouped Conv's groups) as 3-D views: one strided batched cuBLAS call
        lead, n = ((g.batch,), lambda s: (s,)) if g.batch > 1 else ((), lambda s: ())
        self.a = view(buffers[g.a], (*lead, g.M, g.K), t, g.a_off, (*n(g.sab), g.sam, g.sak))
        self.b = view(buffers[g.b], (*lead, g.K, g.N), t, g.b_off, (*n(g.sbb), g.sbk, g.sbn))
        self.c = view(buffers[g.c], (*lead, g.M, g.N), t, g.c_off, (*n(g.scb), g.N, 1))
        # Kept when beta is 0, as matmul.cl keeps it: 0 * inf is NaN there too.
        bias = g.bias is not None
        shape, strides = (*lead, g.M, g.N), (*n(g.sbias), g.scm, g.scn)
        self.bias = view(buffers[g.bias], shape, t, 0, strides) if bias else None

    def run(self, stream) -> None:  # on the current stream, which execute sets
        # a residual Add in place: what C holds, added after the bias (matmul.cl's order)
        previous = self.c.copy() if self.call.accumulate else None
        # On float16 views CuPy's matmul calls cublasGemmEx with CUBLAS_COMPUTE_32F (its default
        # compute type for half): products and sums in float32, C rounded to half once.
        cp.matmul(self.a, self.b, out=self.c)
        alpha, beta = np.float32(self.call.alpha), np.float32(self.call.beta)
        if self.storage == "float16":
            if alpha != 1.0 or self.bias is not None or previous is not None:
                # the epilogue in float32, rounded to half once more (matmul.cl rounds once: C
                # here differs from it by at most that first rounding of the product)
                r = self.c.astype(np.float32) * alpha
                if self.bias is not None:
                    r += self.bias.astype(np.float32) * beta
                if previous is not None:
                    r += previous.astype(np.float32)
                self.c[...] = r  # float32 → half: CuPy rounds to nearest even
            if self.call.relu:
                _relu(self.c)
            return
        if alpha != 1.0:
            self.c *= alpha
        if self.bias is not None:
            self.c += self.bias * beta
        if previous is not None:
            self.c += previous
        if self.call.relu:
            _relu(self.c)


def _relu(c) -> None:
    """``c`` through Relu in place as matmul.cl's epilogue computes it (x < 0 ? 0 : x: NaN stays)."""
    cp.copyto(c, 0, where=c < 0)


DLPACK_CUDA = 2  # DLPack's kDLCUDA device type


class CUDATensor(GPUTensor):
    """An output kept in a CuPy array for the next delegate on the same device, in its device
    dtype (half under precision=fp16)."""

    backend = "cuda"

    def __init__(self, array, dtype, device: Device):
        self.array, self.shape, self.dtype, self.device = array, tuple(array.shape), np.dtype(dtype), device

    @property
    def stored(self) -> np.dtype:
        return self.array.dtype

    def to_host(self) -> np.ndarray:
        with self.device.device:
            return cp.asnumpy(self.array).astype(self.dtype, copy=False)

    def as_array(self):
        """The CuPy array itself (converted on the device when it is stored as half)."""
        if self.array.dtype == self.dtype:
            return self.array
        with self.device.device:
            return self.array.astype(self.dtype)


@dataclass
class CUDASpecialized(Specialized):
    """``Specialized`` with pinned host buffers (device dtype) for its inputs and outputs."""

    host_in: list = field(default_factory=list)
    host_out: list = field(default_factory=list)
    graph: object = None  # graphs and cuBLAS calls of ``launches`` (spec graph=1); False: not capturable


@dataclass
class CUDAHandle(Handle):
    stream: object = None  # every copy and launch of the handle goes on it
    binaries: object = ()  # the kernels the blob stores compiled (``blob.select``)
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


class CUDARuntime(GPURuntime):
    name = "cuda"
    tensor_type = CUDATensor
    launch_types = (Launch, Gemm)
    import_error = IMPORT_ERROR
    # anywhere in a call: a failed launch surfaces at the next synchronizing call
    call_errors = (cp.cuda.driver.CUDADriverError, cp.cuda.runtime.CUDARuntimeError) if cp is not None else ()

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

    # -- the device, a handle, a builder --
    def unpack(self, processed: bytes) -> tuple[dict, object]:
        plan, binaries = blob.unpack(processed)
        return parse(plan, "cuda"), binaries  # a damaged plan: ModelFormatError, not a crash

    def open_device(self, compile_specs: list[CompileSpec]) -> Device:
        spec = compile_spec(compile_specs, "device")
        return device_for(spec.integer() if spec is not None else 0)

    def new_handle(self, compile_specs: list[CompileSpec], stored, **fields) -> CUDAHandle:
        graphs = flag_spec(compile_specs, "graph", True, "cuda")
        with fields["device"].device:
            # Every upload of init goes on the handle's stream, which does not wait for the
            # legacy default stream.
            stream = cp.cuda.Stream(non_blocking=True)
        return CUDAHandle(**fields, stream=stream, binaries=stored, graphs=graphs)

    def on_device(self, handle: CUDAHandle):
        return _current(handle.device, handle.stream)

    def synchronize(self, handle: CUDAHandle) -> None:
        handle.stream.synchronize()

    def builder(self, handle: CUDAHandle, host: dict[int, np.ndarray], shapes: dict) -> CUDABuilder:
        return CUDABuilder(handle.device, handle.plan, host, handle.binaries, shapes)

    def new_specialization(self, handle: CUDAHandle, b: CUDABuilder, **fields) -> CUDASpecialized:
        # The caller's float32 is converted to / from half on the host, in the pinned buffers.
        alloc = handle.device.allocator
        return CUDASpecialized(
            **fields,
            host_in=[alloc.pinned(b.shapes[i], b.storage(i)) for i in fields["inputs"]],
            host_out=[alloc.pinned(b.shapes[i], b.storage(i)) for i in fields["outputs"]],
        )

    # -- memory --
    def upload(self, handle: CUDAHandle, buffer, array: np.ndarray, dtype, storage) -> None:
        if array.size:  # float32 → half under fp16 (nearest even, ±inf past 65504)
            with np.errstate(over="ignore"):
                array = np.ascontiguousarray(np.asarray(array, dtype).astype(storage))
            handle.device.allocator.view(buffer, array.shape, array.dtype).set(array, handle.stream)

    def table(self, handle: CUDAHandle, values: list[int]):
        return cp.asarray(np.asarray(values, np.int32) if values else np.zeros(1, np.int32))

    def bind(self, handle: CUDAHandle, spec: Specialized, launch, args: list) -> None:
        if isinstance(launch, Gemm):
            launch.bind(spec.buffers, handle.device.allocator.view)
        else:
            launch.bound = tuple(args)

    def copy_in(self, handle: CUDAHandle, spec: CUDASpecialized, k: int, x: np.ndarray) -> None:
        pinned = spec.host_in[k]
        if x.size:
            with np.errstate(over="ignore"):
                np.copyto(pinned, x, casting="same_kind")
            view = handle.device.allocator.view
            view(spec.buffers[spec.inputs[k]], x.shape, pinned.dtype).set(pinned, handle.stream)

    def copy_tensor(self, handle: CUDAHandle, spec: CUDASpecialized, k: int, x: CUDATensor) -> None:
        view = handle.device.allocator.view
        view(spec.buffers[spec.inputs[k]], x.shape, spec.host_in[k].dtype)[...] = x.array

    def adopt(self, handle: CUDAHandle, array) -> CUDATensor | None:
        """A DLPack exporter on the handle's CUDA device (a CuPy array, a torch CUDA tensor), read
        where it is: the handle's stream first waits for the caller's current stream, and DLPack's
        stream argument makes the exporter's own stream order itself before the handle's."""
        if not hasattr(array, "__dlpack_device__"):
            return None
        try:
            kind, index = array.__dlpack_device__()
        except Exception:  # an exporter that cannot say where it is: read through the host
            return None
        if int(kind) != DLPACK_CUDA or int(index) != handle.device.index:
            return None
        with handle.device.device:
            ready = cp.cuda.Event(disable_timing=True)
            ready.record()  # on the caller's current stream
            handle.stream.wait_event(ready)
            with handle.stream:
                x = array if isinstance(array, cp.ndarray) else cp.from_dlpack(array)
        return CUDATensor(x, x.dtype, handle.device)

    def array_device(self, handle: CUDAHandle):
        return handle.device.device

    def copy_out(self, handle: CUDAHandle, spec: CUDASpecialized, keep: list[bool] | None) -> list:
        view, stream = handle.device.allocator.view, handle.stream
        kept = {}
        for k, (i, pinned) in enumerate(zip(spec.outputs, spec.host_out)):
            if keep and keep[k]:
                array = view(spec.buffers[i], pinned.shape, pinned.dtype).copy()
                kept[k] = CUDATensor(array, handle.dtypes[i], handle.device)
            elif pinned.size:
                view(spec.buffers[i], pinned.shape, pinned.dtype).get(stream, out=pinned)
        stream.synchronize()
        # Copies: the pinned buffers are refilled by the next call.
        return [
            kept[k] if k in kept else np.array(p, handle.dtypes[i], copy=True)
            for k, (i, p) in enumerate(zip(spec.outputs, spec.host_out))
        ]

    def release(self, spec: CUDASpecialized) -> None:
        # CuPy returns the arrays to its pool when the last reference goes: nothing to free.
        super().release(spec)
        spec.host_in.clear()
        spec.host_out.clear()

    # -- launches --
    def enqueue(self, handle: CUDAHandle, launch) -> None:
        launch.run(handle.stream)

    def launch(self, handle: CUDAHandle, spec: CUDASpecialized) -> None:
        if handle.graphs and spec.graph is not False:
            replay(spec, handle.stream)
        else:
            super().launch(handle, spec)

    def launch_profiled(self, handle: CUDAHandle, spec: Specialized, run) -> None:
        _launch_profiled(spec, handle.stream, run)

    def copy_buffer(
        self, handle: CUDAHandle, spec: Specialized, src: int, dst: int, nbytes: int, offset: int
    ) -> None:
        buffers = spec.buffers
        buffers[dst][offset : offset + nbytes] = buffers[src][:nbytes]

    def read_condition(self, handle: CUDAHandle, spec: Specialized, v: int) -> bool:
        return bool(spec.buffers[v][:1].get(stream=handle.stream)[0])

    def write_value(self, handle: CUDAHandle, spec: Specialized, v: int, value: np.ndarray) -> None:
        raw = np.ascontiguousarray(value).view(np.uint8).ravel()
        spec.buffers[v][: raw.size].set(raw, stream=handle.stream)

    def fence(self, handle: CUDAHandle):
        event = cp.cuda.Event(disable_timing=True)
        event.record(handle.stream)
        return event.synchronize


@contextlib.contextmanager
def _current(device: Device, stream):
    """``device`` current and ``stream`` the current stream."""
    with device.device, stream:
        yield


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


def replay(spec: CUDASpecialized, stream) -> None:
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
                stacklevel=6,
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
