"""Progress lines for long steps on a terminal; silent when the stream is not a TTY."""

from __future__ import annotations

import contextlib
import time
from typing import TextIO


class Progress:
    """Shows ``label …`` while a step runs and ``label: 1.2 s`` when it ends, on a TTY only."""

    def __init__(self, stream: TextIO, *, enabled: bool | None = None):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled

    @contextlib.contextmanager
    def step(self, label: str):
        if not self.enabled:
            yield
            return
        self.stream.write(f"{label} …")
        self.stream.flush()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stream.write(f"\r{label}: {time.perf_counter() - start:.1f} s\n")
            self.stream.flush()
