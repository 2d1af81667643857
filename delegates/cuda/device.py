"""The CUDA device through CuPy: compiler (source or stored cubin → module, cached), allocator, device.

Kernels are the ``kernels_cl`` OpenCL C sources (or generated ones) behind ``cuda_prelude.h``.
A module comes from, in order: this process's cache, keyed by the content hash of (source,
options, compute capability, CUDA version); a binary the blob stores for this device
(``blob.select``); or NVRTC through ``cupy.RawModule``, whose own on-disk cache
(``~/.cupy/kernel_cache``, ``CUPY_CACHE_DIR``) makes a warm process compile nothing.
``BUILD_STATS`` counts each way.
"""

from __future__ import annotations

import hashlib
import math

from offload import profile
from offload.errors import KernelError, OffloadError

from . import blob
from .source import CUDABuildError, cuda_source, kernel_key, nvrtc_options

try:
    import cupy as cp
    import cupyx
except Exception as e:  # ImportError, or a CuPy built for another CUDA
    cp = cupyx = None
    IMPORT_ERROR = f"CuPy is not importable ({type(e).__name__}: {e}); install offload[cuda]"
else:
    IMPORT_ERROR = ""

DEFAULT_BLOCK = 256
MAX_BLOCK = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK_DIMS = (1024, 1024, 64)


def launch_shape(global_size, local_size) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """OpenCL sizes → CUDA (grid, block), dims 0, 1, 2 = x, y, z.

    block = the local size, or DEFAULT_BLOCK threads along x; grid = ceil(global / block) per
    dimension (kernels bound-check the work-items this rounding adds)."""
    dims = len(global_size)
    if not 1 <= dims <= 3 or (local_size is not None and len(local_size) != dims):
        raise KernelError(f"cuda backend: launch of global size {global_size}, local size {local_size}")
    block = list(local_size) if local_size is not None else [DEFAULT_BLOCK] + [1] * (dims - 1)
    block += [1] * (3 - dims)
    glob = list(global_size) + [1] * (3 - dims)
    if min(block) < 1:
        raise KernelError(f"cuda backend: local size {local_size}")
    grid = [-(-int(g) // int(b)) for g, b in zip(glob, block)]
    if (
        math.prod(block) > MAX_BLOCK
        or any(b > m for b, m in zip(block, MAX_BLOCK_DIMS))
        or any(g > m for g, m in zip(grid, MAX_GRID))
    ):
        raise KernelError(f"cuda backend: global {global_size} / local {local_size} exceeds CUDA's limits")
    return tuple(grid), tuple(block)


# ---- compiler: source (or a stored binary) → module, cached -------------------------------------

BUILD_STATS = {"built": 0, "loaded": 0, "memory_hits": 0}
_MODULES: dict[str, object] = {}


def cache_key(device: Device, source: str, options: str) -> str:
    parts = [
        kernel_key(source, options),
        f"{device.cc[0]}.{device.cc[1]}",
        str(device.cuda_version),
        str(device.index),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _stored(stored: blob.Binary | None):
    if stored is None:
        return None
    module = cp.cuda.function.Module()
    try:
        module.load(stored.data)
    except cp.cuda.driver.CUDADriverError:
        return None  # e.g. PTX newer than this driver: compile from source instead
    return module


def build(device: Device, source: str, options: str = "", binaries=()) -> object:
    """A module (``get_function(name)``) of ``source`` for ``device``; a refused source raises
    CUDABuildError with NVRTC's log."""
    key = cache_key(device, source, options)
    module = _MODULES.get(key)
    if module is not None:
        BUILD_STATS["memory_hits"] += 1
        return module
    started, origin = profile.now(), "stored binary"
    module = _stored(blob.select(list(binaries), kernel_key(source, options), device.cc))
    if module is not None:
        BUILD_STATS["loaded"] += 1
    else:
        origin = "source"
        module = cp.RawModule(
            code=cuda_source(source, options), options=nvrtc_options(options), backend="nvrtc"
        )
        try:
            module.compile()
        except cp.cuda.compiler.CompileException as e:
            raise CUDABuildError(f"cuda backend: kernel build failed on {device.name}:\n{e}") from None
        BUILD_STATS["built"] += 1
    run = profile.active()
    if run is not None:  # a profiled load or run: each build is an event
        run.add("kernel build", "build", started, profile.now(), origin=origin, source_bytes=len(source))
    _MODULES[key] = module
    return module


# ---- allocator: device buffers from CuPy's pool, typed views, pinned host buffers ---------------


class Allocator:
    def alloc(self, nbytes: int):
        """Raw bytes (uint8) from CuPy's memory pool; launchers see only the pointer."""
        return cp.empty(max(int(nbytes), 4), cp.uint8)

    @staticmethod
    def view(buffer, shape, dtype, offset: int = 0, strides=None):
        """``buffer`` read as ``dtype`` with ``shape``; ``offset`` and ``strides`` in elements."""
        itemsize = cp.dtype(dtype).itemsize
        strides = None if strides is None else tuple(int(s) * itemsize for s in strides)
        return cp.ndarray(tuple(shape), dtype, buffer.data + int(offset) * itemsize, strides)

    @staticmethod
    def pinned(shape, dtype):
        return cupyx.empty_pinned(tuple(shape), dtype)


# ---- device: index, compute capability, CUDA version ---------------------------------------------


class Device:
    def __init__(self, index: int):
        count = cp.cuda.runtime.getDeviceCount()
        if not 0 <= index < count:
            raise OffloadError(f"cuda backend: no CUDA device {index} ({count} found)")
        self.index = index
        self.device = cp.cuda.Device(index)
        cc = self.device.compute_capability  # "80", "90", "120"
        self.cc = (int(cc[:-1]), int(cc[-1]))
        self.name = cp.cuda.runtime.getDeviceProperties(index)["name"].decode()
        self.cuda_version = cp.cuda.runtime.runtimeGetVersion()
        self.allocator = Allocator()


_DEVICES: dict[int, Device] = {}


def device_for(index: int) -> Device:
    if index not in _DEVICES:
        _DEVICES[index] = Device(index)
    return _DEVICES[index]


def device_names() -> list[str]:
    if cp is None:
        return []
    try:
        n = cp.cuda.runtime.getDeviceCount()
        return [f"{i} {cp.cuda.runtime.getDeviceProperties(i)['name'].decode()}" for i in range(n)]
    except Exception:  # no driver
        return []
