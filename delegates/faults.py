"""Fault injection at the backend interface: make a backend's ``init`` or ``execute`` fail.

Tests (and users rehearsing a device loss) wrap a load or a run in ``inject``; the runtime
asks ``check`` right before it calls the backend, so the fault looks exactly like the backend
raising. What the runtime does then is the contract under test: a failed ``init`` or
``execute`` makes that partition run on its CPU fallback with one warning (``strict``: raise),
never a partial or wrong output.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

STAGES = ("init", "execute")

_lock = threading.Lock()
_armed: dict[tuple[str, str], list] = {}  # (backend, stage) → [error, times left or None]


@contextlib.contextmanager
def inject(
    backend: str, stage: str, error: Exception | None = None, times: int | None = None
) -> Iterator[None]:
    """Inside the block, ``backend``'s ``stage`` raises ``error`` (default: a RuntimeError saying
    the device was lost), every time or the first ``times`` times."""
    if stage not in STAGES:
        raise ValueError(f"fault stage {stage!r}: takes one of {STAGES}")
    error = error if error is not None else RuntimeError(f"injected fault: {backend} device lost in {stage}")
    with _lock:
        _armed[(backend, stage)] = [error, times]
    try:
        yield
    finally:
        with _lock:
            _armed.pop((backend, stage), None)


def check(backend: str, stage: str) -> None:
    """Raise the fault armed for ``backend``'s ``stage``, if any (the runtime calls this)."""
    if not _armed:
        return
    with _lock:
        armed = _armed.get((backend, stage))
        if armed is None:
            return
        error, times = armed
        if times is not None:
            if times <= 0:
                return
            armed[1] = times - 1
    raise error
