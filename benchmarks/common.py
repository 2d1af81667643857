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
