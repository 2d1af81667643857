"""The OpenCL device: compiler (source → program, cached in memory and on disk), allocator, device.

The on-disk cache keeps program binaries under ``$OFFLOAD_CACHE_DIR/opencl`` (default
``~/.cache/offload/opencl``), keyed by the source hash, the build options, the device name and the
driver and platform versions, so a warm process builds nothing. ``OFFLOAD_CACHE_DIR=""`` turns it
off. ``BUILD_STATS`` counts builds and the seconds they took.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offload import profile
from offload.errors import KernelError, OffloadError

from . import icd

try:
    import pyopencl as cl
    import pyopencl.array as cl_array
except Exception as e:  # ImportError, or a broken ICD loader
    cl = cl_array = None
    IMPORT_ERROR = f"pyopencl is not importable: {type(e).__name__}: {e}"
else:
    IMPORT_ERROR = ""


class OpenCLBuildError(KernelError):
    """An OpenCL C source that failed to build; the message carries the build log."""


# ---- compiler: source → cl.Program, cached in memory and on disk --------------------------------

BUILD_STATS = {"built": 0, "build_seconds": 0.0, "disk_hits": 0, "disk_seconds": 0.0, "memory_hits": 0}
_PROGRAMS: dict[tuple[str, int], object] = {}


def cache_dir() -> Path | None:
    root = os.environ.get("OFFLOAD_CACHE_DIR")
    if root == "":
        return None
    base = Path(root) if root else Path.home() / ".cache" / "offload"
    return base / "opencl"


def cache_key(device: Device, source: str, options: str) -> str:
    d = device.device
    parts = [source, options, d.name, d.driver_version, d.platform.version]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# A cache entry: this tag, the SHA-256 of the binary, the binary. A truncated, bit-flipped or
# foreign file fails the check and is rebuilt (a driver handed a damaged binary may crash or
# mis-compute rather than refuse it).
_ENTRY_TAG = b"offload-opencl-binary/1\0"
_DIGEST = 32
_UNWRITABLE: set[str] = set()  # cache folders already warned about


@contextlib.contextmanager
def quiet_compiler():
    """pyopencl warns "Non-empty compiler output" whenever a build log is not empty: Intel's
    runtime writes one for every successful build. A successful build's log says nothing offload
    acts on; a failed build raises with its log in the message."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        yield


def _from_disk(device: Device, path: Path, options: str):
    try:
        entry = path.read_bytes()
    except OSError:
        return None
    head, digest = entry[: len(_ENTRY_TAG)], entry[len(_ENTRY_TAG) : len(_ENTRY_TAG) + _DIGEST]
    binary = entry[len(_ENTRY_TAG) + _DIGEST :]
    if head != _ENTRY_TAG or not binary or hashlib.sha256(binary).digest() != digest:
        return None  # damaged or from another version: build from source and overwrite it
    try:
        with quiet_compiler():
            return cl.Program(device.context, [device.device], [binary]).build(options=options)
    except cl.Error:
        return None  # stale for this driver: rebuilt likewise


def _to_disk(program, path: Path) -> None:
    """Write the entry whole or not at all: to a file of this thread, then renamed over the
    entry (atomic), so that processes sharing the folder never read half an entry."""
    try:
        (binary,) = program.get_info(cl.program_info.BINARIES)
    except (cl.Error, ValueError):
        return
    if not binary:
        return
    tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(_ENTRY_TAG + hashlib.sha256(bytes(binary)).digest() + bytes(binary))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        folder = str(path.parent)
        if folder not in _UNWRITABLE:  # said once per folder: every later build just skips it
            _UNWRITABLE.add(folder)
            warnings.warn(
                f"opencl backend: cannot write the kernel cache in {folder} ({e.strerror or e}); "
                "kernels are rebuilt in each new process. Set OFFLOAD_CACHE_DIR to a writable "
                "folder, or to an empty value to turn the disk cache off.",
                RuntimeWarning,
                stacklevel=2,
            )


def clear_memory_cache() -> None:
    """Forget the programs built in this process (the disk cache stays): as a new process sees it."""
    _PROGRAMS.clear()
    _TUNED.clear()


def build(device: Device, source: str, options: str = ""):
    """Build ``source`` for ``device`` (OpenCL C 1.2); cached in this process and on disk."""
    key = cache_key(device, source, options)
    program = _PROGRAMS.get((key, id(device.context)))
    if program is not None:
        BUILD_STATS["memory_hits"] += 1
        return program
    folder = cache_dir()
    path = folder / f"{key}.bin" if folder is not None else None
    start, started = time.perf_counter(), profile.now()
    origin = "disk cache"
    if path is not None and path.is_file():
        program = _from_disk(device, path, options)
        if program is not None:
            BUILD_STATS["disk_hits"] += 1
            BUILD_STATS["disk_seconds"] += time.perf_counter() - start
    if program is None:
        try:
            with quiet_compiler():
                program = cl.Program(device.context, source).build(options=options, devices=[device.device])
        except cl.Error as e:
            raise OpenCLBuildError(
                f"opencl backend: kernel build failed on {device.device.name}:\n{e}"
            ) from None
        BUILD_STATS["built"] += 1
        BUILD_STATS["build_seconds"] += time.perf_counter() - start
        origin = "source"
        if path is not None:
            _to_disk(program, path)
    run = profile.active()
    if run is not None:  # a profiled load or run: each build (or disk-cache load) is an event
        run.add("kernel build", "build", started, profile.now(), origin=origin, source_bytes=len(source))
    _PROGRAMS[(key, id(device.context))] = program
    return program


# ---- tuning: choices timed once per device, remembered in memory and on disk ------------------

_TUNED: dict[str, object] = {}


def tuning_choice(device: Device, key: str, candidates: list, trial):
    """The candidate with the smallest ``trial(candidate)`` seconds for ``key`` on ``device``.

    Kept per process and in ``<cache>/tuning.json`` (device name + driver version + key), so a
    warm process times nothing. A remembered choice that is no longer a candidate is timed again.
    """
    d = device.device
    full = f"{d.name}|{d.driver_version}|{key}"
    folder = cache_dir()
    path = folder / "tuning.json" if folder is not None else None
    if full not in _TUNED and path is not None and path.is_file():
        with contextlib.suppress(OSError, ValueError):
            _TUNED.update({k: v for k, v in json.loads(path.read_text()).items() if k not in _TUNED})
    if _TUNED.get(full) in candidates:
        return _TUNED[full]
    times = {c: trial(c) for c in candidates}
    _TUNED[full] = best = min(candidates, key=times.__getitem__)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(_TUNED, sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            pass
    return best


# ---- allocator: device buffers, copy in / out ---------------------------------------------------


@dataclass
class Traffic:
    """What a device has been asked to do since it opened, for counting what one run costs: kernel
    launches, waits of the host for the device (a blocking copy, a finish), and bytes copied
    between host and device each way."""

    launches: int = 0
    syncs: int = 0
    to_device: int = 0
    to_host: int = 0

    def snapshot(self) -> Traffic:
        return Traffic(self.launches, self.syncs, self.to_device, self.to_host)


class Allocator:
    def __init__(self, context, queue):
        self.context, self.queue = context, queue
        self.traffic = Traffic()

    def alloc(self, nbytes: int):
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 4))

    def copyin(self, buffer, array: np.ndarray, storage=None, wait: bool = True):
        """``array`` into ``buffer``, converted to the device dtype ``storage`` when one is given
        (float32 → float16 under precision=fp16: round to nearest even, overflow to ±inf).

        ``wait=False`` returns as soon as the copy is enqueued, with its event (None when there
        is nothing to copy): the event holds the host array until the copy is done, and dropping
        it waits for that, so the caller keeps it until a later wait on the queue."""
        if storage is not None and array.dtype != storage:
            with np.errstate(over="ignore"):
                array = array.astype(storage)
        if not array.size:
            return None
        event = cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(array), is_blocking=wait)
        self.traffic.syncs += int(wait)
        self.traffic.to_device += array.nbytes
        return None if wait else event

    def copyout(self, buffer, shape, dtype, storage=None, offset: int = 0) -> np.ndarray:
        """``buffer`` from byte ``offset`` as an array of ``dtype``, read as ``storage`` (the device
        dtype) when given."""
        out = np.empty(shape, storage if storage is not None else dtype)
        if out.size:
            cl.enqueue_copy(self.queue, out, buffer, src_offset=offset, is_blocking=True)
            self.traffic.syncs += 1
            self.traffic.to_host += out.nbytes
        return out.astype(dtype, copy=False)


# ---- device: context + queue, chosen by the `device` spec ---------------------------------------


def all_devices() -> list[tuple[int, int, object]]:
    """Every (platform index, device index, device) the ICD loader offers (``icd.prepare`` first)."""
    icd.prepare()
    found = []
    for p, platform in enumerate(cl.get_platforms()):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        found.extend((p, d, dev) for d, dev in enumerate(devices))
    return found


# A device whose compiler cannot build a one-line kernel is no device for offload: PoCL 3.0's
# LLVM 14 does not know CPUs newer than it (AMD family 1Ah, Zen 5) and fails every build with
# "unknown target CPU 'generic'". The probe runs once per device and process.
_PROBE_SOURCE = "__kernel void offload_probe(__global float* a) { a[get_global_id(0)] += 1.0f; }"
_PROBED: dict[int, str] = {}  # device pointer → "" (builds) or why not
_PROBE_LOCK = threading.Lock()


def build_failure(dev) -> str:
    """Why ``dev`` cannot build OpenCL C ("" when it can): its first build-log line."""
    with _PROBE_LOCK:
        if dev.int_ptr not in _PROBED:
            try:
                ctx = cl.Context([dev])
                with quiet_compiler():
                    cl.Program(ctx, _PROBE_SOURCE).build()
                _PROBED[dev.int_ptr] = ""
            except cl.Error as e:
                log = [line.strip() for line in str(e).splitlines() if "error" in line.lower()]
                _PROBED[dev.int_ptr] = (log[-1] if log else str(e).splitlines()[0])[:200]
        return _PROBED[dev.int_ptr]


def usable_devices() -> tuple[list[tuple[int, int, object]], list[str]]:
    """(the devices that build kernels, in the order the default choice prefers them; a line for
    each that does not)."""
    good, bad = [], []
    for p, d, dev in all_devices():
        why = build_failure(dev)
        if why:
            bad.append(f"{p}:{d} {dev.name} ({dev.platform.name}) cannot build kernels: {why}")
        else:
            good.append((p, d, dev))
    good.sort(key=lambda e: (_preference(e[2]), e[0], e[1]))
    return good, bad


def _is_pocl(dev) -> bool:
    return "portable computing language" in dev.platform.name.lower()


def _preference(dev) -> int:
    """A GPU first; on CPUs PoCL (the runtime the tests and figures were first made on), then
    any other CPU runtime (Intel's, from the ``opencl`` extra)."""
    if not dev.type & cl.device_type.CPU:
        return 0
    return 1 if _is_pocl(dev) else 2


ENV_DEVICE = "OFFLOAD_OPENCL_DEVICE"


def device_name(dev) -> str:
    return f"{dev.name} ({dev.platform.name.strip()})"


def choose(spec: str | None) -> tuple[object, str]:
    """The device for compile spec ``device`` = ``spec`` (``OFFLOAD_OPENCL_DEVICE`` when none is
    given), and why it was chosen."""
    devices = all_devices()
    if not devices:
        raise OffloadError(
            "opencl backend: no OpenCL platform with a device; install one with pip install 'offload[opencl]'"
        )
    origin = "compile spec device"
    if not spec:
        spec, origin = os.environ.get(ENV_DEVICE, ""), ENV_DEVICE
    if not spec:
        good, bad = usable_devices()
        if not good:
            raise OffloadError(f"opencl backend: no usable device: {'; '.join(bad)}")
        dev = good[0][2]
        if not dev.type & cl.device_type.CPU:
            why = "the first GPU that builds kernels"
        elif _is_pocl(dev):
            why = "PoCL builds kernels here"
        else:
            why = "the first CPU runtime that builds kernels here"
        return dev, "; ".join([why, *bad])
    if ":" in spec and all(s.strip().isdigit() for s in spec.split(":", 1)):
        p, d = (int(s) for s in spec.split(":", 1))
        match = [dev for pi, di, dev in devices if (pi, di) == (p, d)]
    elif spec.strip().isdigit():
        match = [devices[int(spec)][2]] if int(spec) < len(devices) else []
    else:
        needle = spec.lower()
        match = [dev for _, _, dev in devices if needle in device_name(dev).lower()]
    if not match:
        names = ", ".join(f"{p}:{d} {device_name(dev)}" for p, d, dev in devices)
        raise OffloadError(f"opencl backend: no device matches {origin}={spec!r} (devices: {names})")
    return match[0], f"{origin}={spec!r}"


class Device:
    def __init__(self, device):
        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device)
        self.allocator = Allocator(self.context, self.queue)
        self._profiling_queue = None

    @property
    def profiling_queue(self):
        """A queue with profiling events, for profiled runs only (made on first use)."""
        if self._profiling_queue is None:
            props = cl.command_queue_properties.PROFILING_ENABLE
            self._profiling_queue = cl.CommandQueue(self.context, self.device, properties=props)
        return self._profiling_queue


_DEVICES: dict[str, Device] = {}


def device_for(spec: str | None) -> Device:
    dev, _ = choose(spec)
    key = f"{dev.platform.name}/{dev.name}/{dev.int_ptr}"
    if key not in _DEVICES:
        _DEVICES[key] = Device(dev)
    return _DEVICES[key]
