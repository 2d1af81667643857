"""Soak test (not in CI): many threads running one loaded module for a long time.

Usage: python benchmarks/soak.py [--threads N] [--runs M] [--backends cpu,opencl] [MODEL ...]
(models: names of the fixtures in tests/models/, default all of them).

For each model and backend: one module is loaded; the reference outputs of every shape case of
the fixture are computed first, one run at a time; then N threads run M times each, cycling
through the shape cases, and every output must equal its reference bit for bit. The process's
resident memory is sampled every 0.2 s; after the first tenth of the runs (arenas, caches and
specializations warm) it must stay flat: the last quarter of the samples no higher than the
second quarter's peak plus 16 MiB. Prints one row per model and backend.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import offload  # noqa: E402
from tests.models import fixtures  # noqa: E402

SLACK_MB = 16


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.perf_counter(), rss_mb()))
            self.done.wait(0.2)


def soak(name: str, backend: str, threads: int, runs: int) -> dict:
    program = offload.load(fixtures.path(name))
    if backend != "cpu":
        program = offload.to_backend(program, backend)
    module = offload.runtime.load(offload.save(program))
    cases = [fixtures.inputs(name, c, np.random.default_rng(c)) for c in range(fixtures.CASES[name])]
    want = [module.run(feeds) for feeds in cases]
    errors: list[str] = []
    counter = iter(range(threads * runs))
    lock = threading.Lock()

    def work(k: int) -> None:
        for i in range(runs):
            case = (k + i) % len(cases)
            got = module.run(cases[case])
            for out, value in want[case].items():
                if not np.array_equal(got[out], value, equal_nan=True):
                    with lock:
                        errors.append(f"thread {k} run {i} case {case} output {out}")
            with lock:
                next(counter, None)

    sampler = Sampler()
    sampler.start()
    start = time.perf_counter()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    module.close()
    rss = [m for _, m in sampler.samples[len(sampler.samples) // 10 :]] or [rss_mb()]
    quarter = max(1, len(rss) // 4)
    second, last = rss[quarter : 2 * quarter] or rss, rss[-quarter:]
    flat = max(last) <= max(second) + SLACK_MB
    return {
        "model": name,
        "backend": backend,
        "runs": threads * runs,
        "seconds": elapsed,
        "mismatches": len(errors),
        "rss_start": rss[0],
        "rss_peak": max(rss),
        "rss_end": rss[-1],
        "flat": flat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=fixtures.FIXTURES)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--backends", default="cpu,opencl")
    args = parser.parse_args()
    print(
        f"{'model':22s} {'backend':8s} {'runs':>6s} {'s':>7s} {'wrong':>6s} {'RSS MiB start/peak/end':>24s} flat"
    )
    failed = False
    for name in args.models:
        for backend in args.backends.split(","):
            r = soak(name, backend, args.threads, args.runs)
            rss = f"{r['rss_start']:.0f}/{r['rss_peak']:.0f}/{r['rss_end']:.0f}"
            print(
                f"{name:22s} {backend:8s} {r['runs']:6d} {r['seconds']:7.1f} {r['mismatches']:6d} {rss:>24s} "
                f"{'yes' if r['flat'] else 'NO'}",
                flush=True,
            )
            failed |= bool(r["mismatches"]) or not r["flat"]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
