"""An OpenCL C kernel source as the CUDA source and NVRTC options both halves of the backend compile.

The compile half (cubins in the blob) and the runtime half (CuPy at init) must compile the same
text with the same options, or a stored cubin would not be the kernel the runtime asks for: both
go through ``cuda_source``, ``nvrtc_options`` and ``kernel_key`` here.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from functools import lru_cache

from offload.errors import KernelError

from ..gpu.api import source

PRELUDE = "cuda_prelude.h"
# A real GPU architecture: sm_80, sm_90a (arch-specific), sm_100f (family-specific).
ARCH = re.compile(r"^sm_(\d{2,3})([af]?)$")


class CUDABuildError(KernelError):
    """A kernel source NVRTC refused; the message carries NVRTC's log."""


@lru_cache(maxsize=1)
def prelude() -> str:
    return source(PRELUDE)


def _defines(cl_options: str) -> tuple[list[str], list[str]]:
    """OpenCL build options split into ``#define`` / ``#undef`` lines and NVRTC options.

    -D / -U become source lines after the prelude, not NVRTC options: NVRTC applies its -D
    before its own builtin header, where a macro named like a template parameter (``-DT=float``
    for layout.cl) breaks it. -I carries over; -cl-* flags, which only tune OpenCL's compiler,
    are dropped; anything else is refused rather than silently ignored."""
    lines, options = [], []
    words = shlex.split(cl_options)
    k = 0
    while k < len(words):
        w = words[k]
        if w in ("-D", "-U", "-I") and k + 1 < len(words):
            w, k = w + words[k + 1], k + 1
        if w.startswith("-D") and len(w) > 2:
            name, _, value = w[2:].partition("=")
            lines.append(f"#define {name} {value if _ else '1'}")
        elif w.startswith("-U") and len(w) > 2:
            lines.append(f"#undef {w[2:]}")
        elif w.startswith("-I") and len(w) > 2:
            options.append(w)
        elif not (w.startswith("-cl-") or w == "-w"):
            raise KernelError(f"cuda backend: OpenCL build option {w!r} has no NVRTC equivalent")
        k += 1
    return lines, options


def cuda_source(cl_source: str, cl_options: str = "") -> str:
    """The prelude, the build options' macros, then ``cl_source`` with its own line numbers (so
    NVRTC's log points into it)."""
    lines, _ = _defines(cl_options)
    return "\n".join([prelude(), *lines, '#line 1 "kernel.cl"', cl_source])


def nvrtc_options(cl_options: str) -> tuple[str, ...]:
    """The NVRTC options of OpenCL build options (their macros go into ``cuda_source``)."""
    return tuple(_defines(cl_options)[1])


def kernel_key(cl_source: str, cl_options: str) -> str:
    """The content hash naming a kernel build: its source and options (device-independent)."""
    return hashlib.sha256(f"{cl_source}\0{cl_options}".encode()).hexdigest()
