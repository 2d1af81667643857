"""What several of the CPU executor's test modules share: a check run on threads at once, and
the conv path a plan takes with or without the compiled loops."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def concurrently(work: Callable[[int], None], count: int = 2) -> None:
    """``work(k)`` for k in range(count), each on its own thread, all at once; an exception (a
    failed assertion) in any of them is raised here."""
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(work, range(count)))


def plan_path(path: str, loops: str) -> str:
    """The path a depthwise plan takes under ``loops`` (the ``conv_loops`` fixture's value) where
    the numpy paths would take ``path``."""
    return "direct" if loops == "compiled" and path in ("rows", "last") else path
