"""What the benchmark scripts share: model files with their weights filled, random inputs of a
program's declared shapes, median timing."""

from __future__ import annotations

import math
import os
import statistics
import time

import numpy as np
import onnx
from onnx import numpy_helper

MOBILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mobile")
STRIPPED_KEY = "offload.stripped"  # benchmarks/make_mobile_models.py


def model_bytes(path: str) -> bytes:
    """The ONNX file at ``path``; one whose weights were stripped (``make_mobile_models.py``) with
    them filled by ``filled_model``."""
    model = onnx.load(path)
    if not any(p.key == STRIPPED_KEY for p in model.metadata_props):
        with open(path, "rb") as f:
            return f.read()
    return filled_model(model).SerializeToString()


def filled_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its stripped initializers given seeded values: normal with standard deviation
    sqrt(2 / fan-in) for weights (rank >= 2, fan-in the product of all but the first dimension,
    so that activations neither vanish nor blow up through the layers), 0.05 for biases; the
    variance of a BatchNormalization positive (0.5 + |normal|). The same model every time."""
    names = next(p.value for p in model.metadata_props if p.key == STRIPPED_KEY).split(",")
    variances = {n.input[4] for n in model.graph.node if n.op_type == "BatchNormalization"}
    rng = np.random.default_rng(0)
    stripped = set(names)
    for t in model.graph.initializer:
        if t.name not in stripped:
            continue
        shape = tuple(t.dims)
        values = rng.standard_normal(shape)
        if t.name in variances:
            values = 0.5 + np.abs(values)
        elif len(shape) >= 2:
            values *= math.sqrt(2.0 / max(1, math.prod(shape[1:])))
        else:
            values *= 0.05
        t.CopyFrom(numpy_helper.from_array(values.astype(np.float32), t.name))
    del model.metadata_props[:]
    return model


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
