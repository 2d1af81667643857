"""Progress for long work on a terminal (tqdm); silent when the stream is not a TTY."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")


class Progress:
    """``step(label)`` shows ``label …`` while a step runs and ``label: 1.2 s`` when it ends;
    ``items(iterable, label)`` shows a tqdm bar over work of known length (files of a batch run).
    Both write only to a terminal."""

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

    def items(self, iterable: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
        if not self.enabled:
            yield from iterable
            return
        from tqdm import tqdm

        yield from tqdm(iterable, desc=label, total=total, file=self.stream, leave=True, unit="item")
