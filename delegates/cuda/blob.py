"""The `cuda` delegate blob: the shared GPU plan, and optionally kernels NVRTC compiled ahead of time.

Layout (all integers little-endian)::

    magic    8 bytes   b"OFLCUDA1"
    length   4 bytes   u32, bytes of the JSON header
    header   JSON      {"plan": <the gpu plan object, plan.py>,
                        "binaries": [{"key": kernel_key(source, options), "arch": "sm_80",
                                      "kind": "cubin" | "ptx", "offset": int, "size": int}, ...]}
    data     bytes     the binaries, each at ``offset`` from the start of data

A binary's ``arch`` is the architecture it was compiled for (for PTX: its virtual one,
``compute_XX``, written as ``sm_XX``). A bare JSON plan (no magic) also loads: it is a blob with
no binaries.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from offload.errors import ModelFormatError

from .source import ARCH

MAGIC = b"OFLCUDA1"


@dataclass(frozen=True)
class Binary:
    key: str  # source.kernel_key of the kernel source and options
    arch: str  # "sm_80"
    kind: str  # "cubin" or "ptx"
    data: bytes


def pack(plan: dict, binaries: list[Binary] = ()) -> bytes:
    entries, data, offset = [], [], 0
    for b in binaries:
        entries.append({"key": b.key, "arch": b.arch, "kind": b.kind, "offset": offset, "size": len(b.data)})
        data.append(b.data)
        offset += len(b.data)
    header = json.dumps({"plan": plan, "binaries": entries}, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(header)) + header + b"".join(data)


def unpack(blob: bytes) -> tuple[dict, list[Binary]]:
    """The plan and binaries of a blob; a malformed one raises ModelFormatError saying where."""
    blob = bytes(blob)
    if not blob.startswith(MAGIC):
        try:
            return json.loads(blob), []
        except (ValueError, RecursionError) as e:
            raise ModelFormatError(
                f"cuda backend: the delegate blob is neither a cuda blob nor a plan: {e}"
            ) from None
    if len(blob) < len(MAGIC) + 4:
        raise ModelFormatError("cuda backend: the delegate blob ends inside its header length")
    (n,) = struct.unpack_from("<I", blob, len(MAGIC))
    start = len(MAGIC) + 4
    if start + n > len(blob):
        raise ModelFormatError(f"cuda backend: the blob's header needs {n} bytes, {len(blob) - start} left")
    try:
        header = json.loads(blob[start : start + n])
        plan, entries = header["plan"], header["binaries"]
        data = blob[start + n :]
        binaries = []
        for e in entries:
            off, size = int(e["offset"]), int(e["size"])
            if off < 0 or size < 0 or off + size > len(data) or e["kind"] not in ("cubin", "ptx"):
                raise ValueError(f"binary {e['key'][:12]} for {e['arch']} lies outside the blob")
            if not ARCH.match(e["arch"]):
                raise ValueError(f"binary {e['key'][:12]} names architecture {e['arch']!r}")
            binaries.append(Binary(str(e["key"]), e["arch"], e["kind"], data[off : off + size]))
    except (ValueError, RecursionError, KeyError, TypeError) as e:
        raise ModelFormatError(f"cuda backend: bad blob header: {e}") from None
    return plan, binaries


def arch_number(arch: str) -> int:
    return int(ARCH.match(arch).group(1))


def select(binaries: list[Binary], key: str, cc: tuple[int, int]) -> Binary | None:
    """The stored binary to load for kernel ``key`` on a device of compute capability ``cc``.

    A cubin runs on its own major version at an equal or higher minor (sm_80 on sm_86, not on
    sm_90); an arch-specific one (sm_90a) only on that exact device. Otherwise PTX for an equal or
    lower virtual architecture, which the driver compiles. None: compile from source."""
    major, minor = cc
    here = major * 10 + minor
    mine = [b for b in binaries if b.key == key]
    cubins = []
    for b in mine:
        if b.kind != "cubin":
            continue
        n, suffix = arch_number(b.arch), ARCH.match(b.arch).group(2)
        if (suffix and n == here) or (not suffix and n // 10 == major and n <= here):
            cubins.append((n, not suffix, b))
    if cubins:
        return max(cubins, key=lambda t: (t[0], t[1]))[2]
    ptx = [(arch_number(b.arch), b) for b in mine if b.kind == "ptx" and not ARCH.match(b.arch).group(2)]
    ptx = [t for t in ptx if t[0] <= here]
    return max(ptx, key=lambda t: t[0])[1] if ptx else None
