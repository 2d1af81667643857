"""Device-free NVRTC: an OpenCL C kernel source → cubin or PTX for a named GPU architecture.

Uses ``cuda-bindings``' nvrtc module over the ``nvidia-cuda-nvrtc-cu12`` wheel: no driver, no
GPU. The compile half stores what this produces in the blob; the tests use it to prove every
kernel compiles for CUDA on machines without a GPU. ``COMPILE_STATS`` counts compiles.
"""

from __future__ import annotations

import time

from offload.errors import BackendUnavailableError, KernelError

from .source import ARCH, CUDABuildError, cuda_source, nvrtc_options

try:
    from cuda.bindings import nvrtc as _nvrtc
except Exception as e:  # ImportError, or the NVRTC library missing
    _nvrtc = None
    IMPORT_ERROR = f"NVRTC is not importable ({type(e).__name__}: {e}); install cuda-bindings<13 and nvidia-cuda-nvrtc-cu12"
else:
    IMPORT_ERROR = ""

COMPILE_STATS = {"compiled": 0, "seconds": 0.0}


def available() -> bool:
    return _nvrtc is not None


def _require() -> None:
    if _nvrtc is None:
        raise BackendUnavailableError(f"cuda backend: {IMPORT_ERROR}")


def _check(result, what: str) -> tuple:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != _nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = _nvrtc.nvrtcGetErrorString(err)
        raise CUDABuildError(f"cuda backend: {what}: {msg.decode(errors='replace')}")
    return tuple(rest)


def version() -> tuple[int, int]:
    _require()
    return tuple(_check(_nvrtc.nvrtcVersion(), "nvrtcVersion"))


def supported_archs() -> list[int]:
    """The sm_XX numbers this NVRTC compiles for (e.g. 75, 80, 90)."""
    _require()
    (archs,) = _check(_nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return [int(a) for a in archs]


def compile(cl_source: str, cl_options: str, arch: str, kind: str = "cubin", name: str = "kernel") -> bytes:
    """``cl_source`` (behind the prelude) compiled for ``arch`` ('sm_80'): a cubin, or PTX for
    ``compute_80`` when ``kind`` is 'ptx'. A refused source raises CUDABuildError with the log."""
    _require()
    m = ARCH.match(arch)
    if m is None or kind not in ("cubin", "ptx"):
        raise KernelError(f"cuda backend: cannot compile {kind!r} for {arch!r}")
    target = arch if kind == "cubin" else f"compute_{m.group(1)}{m.group(2)}"
    options = [f"--gpu-architecture={target}", *nvrtc_options(cl_options)]
    start = time.perf_counter()
    (prog,) = _check(
        _nvrtc.nvrtcCreateProgram(
            cuda_source(cl_source, cl_options).encode(), f"{name}.cu".encode(), 0, [], []
        ),
        "nvrtcCreateProgram",
    )
    try:
        (err,) = _nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        if err != _nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = _check(_nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _check(_nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise CUDABuildError(
                f"cuda backend: NVRTC failed on {name} for {target} with {' '.join(options)}:\n"
                + log.decode(errors="replace").rstrip("\0 \n")
            )
        get_size, get = (
            (_nvrtc.nvrtcGetCUBINSize, _nvrtc.nvrtcGetCUBIN)
            if kind == "cubin"
            else (_nvrtc.nvrtcGetPTXSize, _nvrtc.nvrtcGetPTX)
        )
        (size,) = _check(get_size(prog), "get size")
        out = b" " * size
        _check(get(prog, out), "get binary")
    finally:
        _nvrtc.nvrtcDestroyProgram(prog)
    COMPILE_STATS["compiled"] += 1
    COMPILE_STATS["seconds"] += time.perf_counter() - start
    return out
