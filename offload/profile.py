"""Profiles of runs: where the time of a run goes, as Chrome trace events and as a table.

``Module.run(inputs, profile=p)`` with a ``Profile`` ``p`` records one event per instruction (CPU
kernel, move, jump, delegate call), one per plan call (sub-plans of If / Loop / Scan bodies nest
inside their kernel's event), and what backends report while the run is active (``active()``):
specializations, and on the opencl backend each kernel launch's device time (profiling events on
a queue of its own) and each copy between host and device with its bytes. A run without a profile
takes none of these paths.

``Profile.trace()`` is Chrome's trace-event format ("X" complete events in microseconds, one
track per thread and one per device), which Perfetto and chrome://tracing open;
``Profile.summary()`` is a table of the names that took the most time.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from offload.files import replace_file

_ACTIVE: contextvars.ContextVar[Profile | None] = contextvars.ContextVar("offload_profile", default=None)


def now() -> int:
    """The clock of every event: nanoseconds, monotonic."""
    return time.perf_counter_ns()


@dataclass
class Event:
    name: str
    cat: str  # plan | kernel | move | jump | free | delegate | specialize | device | copy | load | build
    start: int  # ns, on ``now()``'s clock
    dur: int  # ns
    track: str  # "cpu <thread id>" or a device's name
    args: dict = field(default_factory=dict)


class Profile:
    """Events of the runs given this profile (any number of runs, from any thread)."""

    def __init__(self):
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, name: str, cat: str, start: int, end: int, track: str | None = None, **args) -> None:
        track = track or f"cpu {threading.get_ident()}"
        with self._lock:
            self.events.append(Event(name, cat, start, max(0, end - start), track, args))

    @contextlib.contextmanager
    def span(self, name: str, cat: str, **args) -> Iterator[None]:
        start = now()
        try:
            yield
        finally:
            self.add(name, cat, start, now(), **args)

    def trace(self) -> dict:
        """Chrome trace-event JSON: ``{"traceEvents": [...]}``, times in microseconds."""
        origin = min((e.start for e in self.events), default=0)
        tracks = {t: k + 1 for k, t in enumerate(dict.fromkeys(e.track for e in self.events))}
        pid = os.getpid()
        out = [
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}}
            for track, tid in tracks.items()
        ]
        for e in self.events:
            out.append(
                {
                    "name": e.name,
                    "cat": e.cat,
                    "ph": "X",
                    "ts": (e.start - origin) / 1e3,
                    "dur": e.dur / 1e3,
                    "pid": pid,
                    "tid": tracks[e.track],
                    "args": e.args,
                }
            )
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def write(self, path: str | os.PathLike) -> None:
        replace_file(path, json.dumps(self.trace()).encode())

    def summary(self, top: int = 15) -> str:
        """The names that took the most time (plan and load events left out: they hold the others)."""
        rows: dict[tuple[str, str], list[float]] = {}
        for e in self.events:
            if e.cat not in ("plan", "load"):
                rows.setdefault((e.cat, e.name), []).append(e.dur / 1e6)
        total = sum(sum(v) for (cat, _), v in rows.items() if cat in ("kernel", "delegate")) or 1.0
        ranked = sorted(rows.items(), key=lambda kv: -sum(kv[1]))[:top]
        lines = [f"{'what':<12} {'name':<40} {'calls':>6} {'total ms':>10} {'mean ms':>9} {'share':>6}"]
        for (cat, name), times in ranked:
            share = f"{100 * sum(times) / total:5.1f}%" if cat in ("kernel", "delegate") else ""
            lines.append(
                f"{cat:<12} {name[:40]:<40} {len(times):>6} {sum(times):>10.3f} "
                f"{sum(times) / len(times):>9.4f} {share:>6}"
            )
        return "\n".join(lines)


def active() -> Profile | None:
    """The profile of the run in progress on this thread, if it is being profiled."""
    return _ACTIVE.get()


@contextlib.contextmanager
def profiling(profile: Profile | None) -> Iterator[None]:
    """Make ``profile`` the active one for the run inside (backends report to it)."""
    if profile is None:
        yield
        return
    token = _ACTIVE.set(profile)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
