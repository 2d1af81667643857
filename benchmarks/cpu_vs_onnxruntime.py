"""Times offload's CPU runtime (.pte) against onnxruntime on the same models, in one process.

Usage: python benchmarks/cpu_vs_onnxruntime.py [--repeat N] [MODEL.onnx ...]
Without models it uses ONNX's bundled light models. Each model is compiled to .pte in memory
and run by offload.runtime; prints the median time of each and the ratio offload / onnxruntime
(lower is better for offload).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort

import offload

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _inputs(path: str) -> dict[str, np.ndarray]:
    program = offload.load(path)
    rng = np.random.default_rng(0)
    feeds = {}
    for v in program.main.inputs:
        shape = tuple(d if isinstance(d, int) else 1 for d in v.type.shape)
        feeds[v.name] = rng.standard_normal(shape).astype(v.type.dtype.numpy)
    return feeds


def _median_ms(fn, args, repeat: int) -> float:
    fn(*args)  # warm-up: imports, first-touch allocations
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(LIGHT, "*.onnx")))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.log_severity_level = 3  # no warnings about unused initializers in the light models
    print(f"{'model':28s} {'offload ms':>11s} {'ort ms':>9s} {'ratio':>7s}")
    for path in models:
        feeds = _inputs(path)
        method = offload.runtime.load(offload.save(offload.load(path))).method("forward")
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        ours = _median_ms(method.run, (feeds,), args.repeat)
        theirs = _median_ms(session.run, (None, feeds), args.repeat)
        name = os.path.basename(path)[: -len(".onnx")]
        print(f"{name:28s} {ours:11.2f} {theirs:9.2f} {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
