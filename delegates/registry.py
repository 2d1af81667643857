"""The backend registry: built-in backends plus the plugins of entry-point group ``offload.backends``.

Plugins are found on first use, not at import: listing entry points and importing plugin
packages costs time that a program without delegates should not pay. A plugin that fails to
import, or gives something that is not a ``Backend``, is kept as a broken entry with its error,
so that one bad package neither hides the others nor stops offload.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from offload.errors import BackendUnavailableError

from . import cuda, opencl
from .backend import Backend

GROUP = "offload.backends"

# Backends that ship with offload, by name (the CUDA and OpenCL backends register here).
BUILTIN: dict[str, Backend] = {"opencl": opencl.backend, "cuda": cuda.backend}


@dataclass(frozen=True)
class BackendEntry:
    """One backend as found: its name, where it came from, and the backend or why it failed."""

    name: str
    source: str  # "built-in" or "<distribution> <version>"
    backend: Backend | None
    error: str | None = None


_entries: list[BackendEntry] | None = None


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of the group (tests replace this to simulate plugins)."""
    return list(importlib.metadata.entry_points(group=GROUP))


def _source(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else f"entry point {ep.value}"


def _backend_of(ep: importlib.metadata.EntryPoint) -> Backend:
    """Load an entry point's object: a Backend, or a zero-argument callable that returns one."""
    obj = ep.load()
    if not isinstance(obj, Backend) and callable(obj):
        obj = obj()
    if not isinstance(obj, Backend):
        raise TypeError(f"'{ep.value}' is a {type(obj).__name__}, not an offload Backend")
    if obj.name != ep.name:
        # The name is the delegate id written into .pte files: both must agree.
        raise ValueError(f"entry point '{ep.name}' gives a backend named '{obj.name}'")
    return obj


def _plugin(ep: importlib.metadata.EntryPoint, taken: dict[str, BackendEntry]) -> BackendEntry:
    source = _source(ep)
    if ep.name in taken:
        error = f"name '{ep.name}' is already taken by {taken[ep.name].source}"
        return BackendEntry(ep.name, source, None, error)
    try:
        return BackendEntry(ep.name, source, _backend_of(ep))
    except Exception as e:  # any failure of third-party code is recorded, never raised
        return BackendEntry(ep.name, source, None, f"{type(e).__name__}: {e}")


def _scan() -> list[BackendEntry]:
    entries = [BackendEntry(name, "built-in", b) for name, b in BUILTIN.items()]
    taken = {e.name: e for e in entries}
    for ep in sorted(_entry_points(), key=lambda ep: ep.name):
        entry = _plugin(ep, taken)
        entries.append(entry)
        taken.setdefault(entry.name, entry)
    return entries


def backends() -> list[BackendEntry]:
    """Every backend found, built-in first, broken plugins included (with their error)."""
    global _entries
    if _entries is None:
        _entries = _scan()
    return list(_entries)


def refresh() -> None:
    """Forget what was found, so that the next call looks again (after installing a plugin)."""
    global _entries
    _entries = None


def _entry(name: str) -> BackendEntry | None:
    return next((e for e in backends() if e.name == name), None)


def find(name: str) -> Backend | None:
    """The backend of this name, or None when it is unknown or its plugin is broken."""
    entry = _entry(name)
    return entry.backend if entry is not None else None


def get(name: str) -> Backend:
    """The backend of this name; raises BackendUnavailableError saying what is known instead."""
    entry = _entry(name)
    if entry is None:
        known = ", ".join(sorted({e.name for e in backends() if e.backend is not None})) or "none"
        raise BackendUnavailableError(f"no backend named '{name}' (known backends: {known})")
    if entry.backend is None:
        raise BackendUnavailableError(f"backend '{name}' ({entry.source}) failed to load: {entry.error}")
    return entry.backend


def availability(name: str):
    """Whether the backend of this name can run here (an ``Availability``, with the reason when
    not); a runtime half that fails to load is that reason (a plugin may lack its driver)."""
    from .backend import Availability

    try:
        return get(name).runtime().is_available()
    except BackendUnavailableError as e:
        return Availability(False, str(e))
    except Exception as e:  # third-party code
        return Availability(False, f"its runtime failed to load: {type(e).__name__}: {e}")
