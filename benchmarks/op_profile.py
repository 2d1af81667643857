"""Where the time goes, per op type: offload's CPU executor and onnxruntime's own profiler.

Usage: [OPENBLAS_NUM_THREADS=1] python benchmarks/op_profile.py [--threads N] [--runs N] [--mobile]
    [MODEL.onnx ...]
Without models it uses ONNX's bundled light models (--mobile: benchmarks/mobile). Each model
goes through the default graph passes and runs ``--runs`` times under ``offload.profile`` (one
event per instruction, each instruction's median taken); onnxruntime runs the original model as
many times with its profiler
(``SessionOptions.enable_profiling``: one event per kernel, after its own graph fusions, so
onnxruntime's Conv includes the activation it fused, and offload's does not). Prints, per op
type, milliseconds per run of each and their ratio. Profiling adds per-op overhead to both:
compare the shares, and take whole-run ratios from cpu_vs_onnxruntime.py.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile

import onnx
import onnxruntime as ort
from common import MOBILE, inputs, model_bytes  # benchmarks/common.py (run as a script)

import offload
from offload.profile import Profile

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def offload_ms(data: bytes, feeds: dict, runs: int) -> dict[str, float]:
    method = offload.runtime.load(offload.save(offload.optimize(offload.load(data)))).method("forward")
    for _ in range(2):
        method.run(feeds)
    profile = Profile()
    for _ in range(runs):
        method.run(feeds, profile=profile)
    names = [step.name.split("::")[-1] for step in method.instructions]
    times: dict[int, list[float]] = {}
    for e in profile.events:
        if e.cat in ("kernel", "delegate") and e.args.get("pc") is not None:
            times.setdefault(e.args["pc"], []).append(e.dur / 1e6)
    return _by_op((names[pc], t) for pc, t in times.items())


def _by_op(rows) -> dict[str, float]:
    """Per op type, the sum over its instructions of each one's median time: a run preempted on a
    busy machine moves a median little, a sum of all runs by whole time slices."""
    out: dict[str, float] = {}
    for op, times in rows:
        out[op] = out.get(op, 0.0) + statistics.median(times)
    return out


def onnxruntime_ms(data: bytes, feeds: dict, runs: int, threads: int) -> dict[str, float]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    for _ in range(2):
        session.run(None, feeds)
    with tempfile.TemporaryDirectory() as tmp:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        session.run(None, feeds)  # the first run's events are left out below (allocation)
        for _ in range(runs):
            session.run(None, feeds)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    run_events = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    after_first = run_events[0]["ts"] + run_events[0]["dur"]
    times: dict[str, tuple[str, list[float]]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and e["ts"] > after_first:
            times.setdefault(e["name"], (e["args"]["op_name"], []))[1].append(e["dur"] / 1e3)
    return _by_op(times.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads")
    parser.add_argument("--mobile", action="store_true", help="the mobile convnets of benchmarks/mobile")
    args = parser.parse_args()
    pattern = os.path.join(MOBILE, "*.onnx") if args.mobile else os.path.join(LIGHT, "*.onnx")
    for path in args.models or sorted(glob.glob(pattern)):
        data = model_bytes(path)
        feeds = inputs(offload.load(data))
        ours = offload_ms(data, feeds, args.runs)
        theirs = onnxruntime_ms(data, feeds, args.runs, args.threads)
        name = os.path.basename(path)[: -len(".onnx")]
        total_ours, total_theirs = sum(ours.values()), sum(theirs.values())
        print(f"{name}: offload {total_ours:.1f} ms, onnxruntime {total_theirs:.1f} ms per run (profiled)")
        print(f"  {'op':24s} {'offload ms':>10s} {'share':>6s} {'ort ms':>8s} {'share':>6s}")
        for op in sorted(set(ours) | set(theirs), key=lambda k: -ours.get(k, theirs.get(k, 0.0))):
            a, b = ours.get(op), theirs.get(op)
            cols = [f"{a:10.2f} {100 * a / total_ours:5.1f}%" if a else f"{'':10s} {'':6s}"]
            cols.append(f"{b:8.2f} {100 * b / total_theirs:5.1f}%" if b else f"{'':8s} {'':6s}")
            print(f"  {op:24s} {cols[0]} {cols[1]}")


if __name__ == "__main__":
    main()
