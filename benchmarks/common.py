"""What the benchmark scripts share: random inputs of a program's declared shapes, median timing."""

from __future__ import annotations

import statistics
import time

import numpy as np


def inputs(program) -> dict[str, np.ndarray]:
    """Standard-normal inputs of the declared shapes and dtypes (symbolic dims as 1), seeded."""
    rng = np.random.default_rng(0)
    feeds = {}
    for v in program.main.inputs:
        shape = tuple(d if isinstance(d, int) else 1 for d in v.type.shape)
        feeds[v.name] = rng.standard_normal(shape).astype(v.type.dtype.numpy)
    return feeds


def median_ms(fn, args, repeat: int) -> float:
    """The median of ``repeat`` timed calls of ``fn(*args)``, after one untimed warm-up call."""
    fn(*args)  # warm-up: imports, first-touch allocations
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def alternating_ms(calls: list[tuple], repeat: int, pause: float = 0.2) -> list[float]:
    """The median ms of each ``(fn, args)`` in ``calls``, timed in turn ``repeat`` rounds (one
    call of each per round, after one untimed warm-up round), so that all see the same machine
    load: on a shared machine compare their ratios, not their times.

    ``pause`` seconds pass before each timed call: the worker threads of the previous call's
    runtime (OpenBLAS's spin about 0.1 s after a GEMM, onnxruntime's after a run) go idle first,
    so that neither runtime is timed while the other's threads still spin on the same cores (on
    2 cores that made either one up to 5x slower, depending on which ran second)."""
    for fn, args in calls:
        fn(*args)
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for (fn, args), t in zip(calls, times):
            time.sleep(pause)
            start = time.perf_counter()
            fn(*args)
            t.append(time.perf_counter() - start)
    return [statistics.median(t) * 1e3 for t in times]
