"""Which OpenCL runtimes the ICD loader sees: PoCL, and Intel's CPU runtime where the extra put it.

pyopencl's wheel bundles the ocl-icd loader and PoCL 3.0 (LLVM 14). That PoCL cannot build a kernel
on CPUs newer than its LLVM (AMD family 1Ah, Zen 5: "unknown target CPU 'generic'"), so on x86-64
Linux the ``opencl`` extra also installs Intel's CPU OpenCL runtime from PyPI (``intel-opencl-rt``
with ``intel-cmplr-lib-rt``), which builds offload's kernels on AMD and Intel CPUs alike.

The bundled loader always reads pyopencl's own ``pocl.icd`` and the ``.icd`` files of one folder:
``OCL_ICD_VENDORS`` when set, else ``/etc/OpenCL/vendors``. Intel's wheel installs its ``.icd``
with a placeholder path, so before the first platform query ``prepare()`` writes a vendors folder
of offload's own (the system's ``.icd`` files plus one naming the installed ``libintelocl.so``)
and points ``OCL_ICD_VENDORS`` at it. The loader reads the variable once per process, at its first
call, which is why this runs before offload's first ``cl.get_platforms()``. A user who set
``OCL_ICD_VENDORS`` (or ``OFFLOAD_OPENCL_ICD=0``) keeps the loader as configured.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from importlib import metadata
from pathlib import Path

SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")
_LOCK = threading.Lock()
_STATE: dict[str, str] = {}  # "note": what prepare() did, once per process


def intel_runtime() -> Path | None:
    """The ``libintelocl.so`` that the ``intel-opencl-rt`` wheel installed, if it is here."""
    try:
        files = metadata.distribution("intel-opencl-rt").files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "libintelocl.so":
            path = Path(f.locate()).resolve()
            if path.is_file():
                return path
    return None


def _vendors_folder(lines: dict[str, str]) -> Path:
    """A folder holding one ``.icd`` file per entry of ``lines`` (file name → library path)."""
    key = hashlib.sha256(repr(sorted(lines.items())).encode()).hexdigest()[:16]
    base = os.environ.get("OFFLOAD_CACHE_DIR")
    roots = [Path(base)] if base else [Path.home() / ".cache" / "offload"]
    roots.append(Path(tempfile.gettempdir()) / f"offload-{os.getuid()}")
    for root in roots:
        folder = root / f"opencl-vendors-{key}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, library in lines.items():
                target = folder / name
                if not target.is_file() or target.read_text().strip() != library:
                    tmp = folder / f".{name}.{os.getpid()}.tmp"
                    tmp.write_text(library + "\n")
                    os.replace(tmp, target)
            return folder
        except OSError:
            continue
    raise OSError("no writable folder for the OpenCL vendors list")


def prepare() -> str:
    """Point the ICD loader at the runtimes the ``opencl`` extra installed (once per process).

    Returns a line saying what the loader will read (shown by ``offload backends``)."""
    with _LOCK:
        if "note" not in _STATE:
            _STATE["note"] = _prepare()
        return _STATE["note"]


def _prepare() -> str:
    if os.environ.get("OFFLOAD_OPENCL_ICD", "1") == "0":
        return "ICD loader as configured (OFFLOAD_OPENCL_ICD=0)"
    if os.environ.get("OCL_ICD_VENDORS"):
        return f"ICD loader as configured (OCL_ICD_VENDORS={os.environ['OCL_ICD_VENDORS']})"
    intel = intel_runtime()
    if intel is None:
        return "runtimes: PoCL (pyopencl's wheel) and the system's (/etc/OpenCL/vendors)"
    lines = {}
    if SYSTEM_VENDORS.is_dir():
        for icd in sorted(SYSTEM_VENDORS.glob("*.icd")):
            try:
                lines[icd.name] = icd.read_text().strip()
            except OSError:
                continue
    lines["offload-intel-cpu.icd"] = str(intel)
    try:
        folder = _vendors_folder(lines)
    except OSError as e:
        return f"Intel's CPU runtime is installed but cannot be registered: {e}"
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return f"runtimes: PoCL (pyopencl's wheel), Intel's CPU runtime ({intel.parent}), the system's"
