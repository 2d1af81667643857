"""One loaded Module shared by many threads: every caller gets the outputs it would get alone.

Runs of a Method take arena sets from a pool (``runtime/module.py``); GPU delegate handles
serialize their own runs. The reference for each call is the same module run single-threaded
first, itself checked against onnxruntime.
"""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload import runtime
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

THREADS, RUNS = 8, 200


def _hammer(module, name: str) -> list[str]:
    feeds = [
        fixtures.inputs(name, k % fixtures.CASES[name], np.random.default_rng(k)) for k in range(THREADS)
    ]
    want = [module.run(f) for f in feeds]
    session = ort.InferenceSession(fixtures.path(name), providers=["CPUExecutionProvider"])
    for f, w in zip(feeds, want):  # the single-threaded answers, held to onnxruntime first
        for key, value in zip([o.name for o in session.get_outputs()], session.run(None, f)):
            np.testing.assert_allclose(w[key], value, rtol=1e-4, atol=1e-4)
    failures: list[str] = []
    start = threading.Barrier(THREADS)

    def work(k: int) -> None:
        start.wait()
        try:
            for r in range(RUNS):
                got = module.run(feeds[k])
                for key, value in want[k].items():
                    if got[key].shape != value.shape or not np.array_equal(got[key], value):
                        failures.append(f"thread {k} run {r}: output {key} differs")
                        return
        except Exception as e:  # reported, not swallowed: the test fails on it
            failures.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


@pytest.mark.parametrize("name", ["control_flow", "gru_model"])
def test_threads_share_a_module_on_the_cpu(name):
    """control_flow runs If / Loop sub-plans (each with its own arena pool); gru_model one chain."""
    module = runtime.load(offload.save(offload.load(fixtures.path(name))))
    assert _hammer(module, name) == []
    method = module.method("forward")
    assert 1 <= len(method._pool) <= THREADS  # one arena set per concurrent run at most


@needs_opencl
@pytest.mark.parametrize("name", ["control_flow", "gru_model"])
def test_threads_share_a_module_on_opencl(name):
    lowered = offload.to_backend(offload.load(fixtures.path(name)), "opencl")
    module = runtime.load(offload.save(lowered))
    assert all(d[:2] == ("opencl", "backend") for d in module.method("forward").delegates)
    assert _hammer(module, name) == []
