"""Where a run's time goes inside the CPU executor's bound calls: each numpy call timed in place.

Usage: [OPENBLAS_NUM_THREADS=1] python benchmarks/call_profile.py [--runs N] [--steps K] MODEL.onnx|NAME
NAME is one of the mobile convnets of benchmarks/mobile (e.g. mobilenet_v2). The model goes
through the default graph passes and is saved and loaded as a .pte; after warm runs, each bound
step's numpy calls (``runtime.kernels.conv_recipe``'s plans list them) are wrapped in a timer and the
method runs ``--runs`` times. Prints the medians summed per (prepared call, numpy function), then
the ``--steps`` slowest steps call by call with their operands' shapes (strides, in elements,
where not C-contiguous). The timers add about a microsecond per call; calls are timed where they
run, so a product whose weights a run left cold shows it, as onnxruntime's profiler shows its own
(``op_profile.py``). This reads the executor's private structures: a tool, not an interface.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import statistics
import time

from common import MOBILE, inputs, model_bytes  # benchmarks/common.py (run as a script)

import offload
from offload.runtime.kernels.buffers import _run_calls


def _describe(a) -> str:
    shape = getattr(a, "shape", None)
    if shape is None:
        return type(a).__name__
    if a.flags.c_contiguous:
        return str(shape)
    return f"{shape} strides {tuple(s // a.itemsize for s in a.strides)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    path = args.model if args.model.endswith(".onnx") else os.path.join(MOBILE, args.model + ".onnx")
    data = model_bytes(path)
    feeds = inputs(offload.load(data))
    method = offload.runtime.load(offload.save(offload.optimize(offload.load(data)))).method("forward")
    for _ in range(3):
        method.run(feeds)
    timed = []  # (step, calls, times per call)
    for _, _, bound in method._pool:
        for k, run in enumerate(method._bound_runs):
            for j, step in enumerate(run):
                call = bound[k][j]
                if not (isinstance(call, functools.partial) and call.func is _run_calls):
                    continue  # not a list of numpy calls (a ufunc, a concatenation: left alone)
                calls, times = call.args[0], [[] for _ in call.args[0]]
                timed.append((step, calls, times))

                def each(calls=calls, times=times):
                    for c, t in zip(calls, times):
                        start = time.perf_counter()
                        c()
                        t.append(time.perf_counter() - start)

                bound[k][j] = each
    for _ in range(args.runs):
        method.run(feeds)
    rows, by_call = [], collections.defaultdict(float)
    for step, calls, times in timed:
        if not times[0]:
            continue  # a set of arena views this method did not use
        medians = [statistics.median(t) for t in times]
        rows.append((sum(medians), step, calls, medians))
        for c, t in zip(calls, medians):
            fn = getattr(c, "func", c)
            by_call[(type(step.call).__name__, getattr(fn, "__name__", str(fn)))] += t
    total = sum(r[0] for r in rows)
    print(f"{os.path.basename(path)}: {total * 1e3:.2f} ms a run in timed calls (medians)")
    for (kind, fn), t in sorted(by_call.items(), key=lambda kv: -kv[1]):
        print(f"  {t * 1e3:8.3f} ms  {kind} {fn}")
    for t, step, calls, medians in sorted(rows, key=lambda r: -r[0])[: args.steps]:
        print(f"{t * 1e3:.3f} ms  {step.kernel.what}")
        for c, m in zip(calls, medians):
            fn = getattr(c, "func", c)
            operands = ", ".join(_describe(a) for a in getattr(c, "args", ()))
            print(f"  {m * 1e3:8.3f}  {getattr(fn, '__name__', fn)}({operands})")


if __name__ == "__main__":
    main()
