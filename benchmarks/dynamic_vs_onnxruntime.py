"""Times the OpenCL backend on models with symbolic dims, shape by shape, against onnxruntime.

Usage: python benchmarks/dynamic_vs_onnxruntime.py [--repeat N] [--device SPEC] [--cold-pocl] [FIXTURE ...]
Without names it takes every fixture of tests/models/ (tests/models/fixtures.py: exported models
with a symbolic batch, image size or sequence length) and each of its shape cases, in order, in one
process. Per model the program is lowered with ``offload.to_backend(program, "opencl")``, saved
and loaded with ``offload.runtime.load``; a partition with symbolic dims builds its plan for the
concrete input shapes when it first meets them and keeps it in an LRU cache keyed by the input
signature (delegates/gpu/specialize.py). Per shape case it prints:

- ops on opencl: ops inside opencl delegates / all ops of the imported program (ops in If/Loop
  bodies counted too); ``!`` marks a delegate that runs on its CPU fallback (init failed, or a
  run refused its shapes), with the reason below the table;
- first run ms: the wall time of ``module.run`` at a shape this module has never run. It includes
  specializing every symbolic partition to that shape (shape inference, buffer placement,
  argument binding, recorded launches) and kernel builds only for kernel programs (source and
  build options) never built before in this process: the process starts with an empty on-disk
  kernel cache (``OFFLOAD_CACHE_DIR`` is a fresh temp dir, as for the cold builds of
  benchmarks/opencl_vs_onnxruntime.py), so the first shape of the first model pays for the
  builds from source; later shapes and models reuse the programs already built, except where a
  size picks another variant of a kernel (the GEMM's build options); the ``kernels built`` column
  counts the builds of that first run. On PoCL the driver compiles more lazily: when offload
  writes a built program to its disk cache (asking for the binary compiles every kernel of it)
  and at a kernel's first enqueue with a new launch configuration. PoCL keeps those results in
  its own on-disk cache (``POCL_CACHE_DIR``, by default ~/.cache/pocl), which this script leaves
  alone unless ``--cold-pocl`` gives it an empty one: without the flag the first runs depend on
  what earlier processes compiled (the gap between ``first run ms`` and ``spec ms`` is mostly
  enqueue-time compilation);
- steady ms: the median of ``--repeat`` runs at the same shape after it (a cache hit);
- CPU ms: offload's numpy CPU executor on the program not lowered (offload.save + runtime.load);
- onnxruntime ms: CPUExecutionProvider, 2 intra-op threads, the same feeds;
- steady / ort: lower is better for offload;
- spec ms (n) / kernels built: the seconds of the n specializations the handles' stats report
  for the first run, and the kernel programs built from source during it
  (opencl.device.BUILD_STATS).

Every output of the first opencl run, a steady one and the CPU executor is checked against
onnxruntime (rtol = atol = 1e-3); mismatches and errors are listed after the table and the script
exits with an AssertionError. On PoCL the OpenCL "device" is this machine's CPU.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import onnxruntime as ort
from common import median_ms  # benchmarks/common.py (run as a script)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.models import fixtures  # the repository root, on sys.path above

RTOL = ATOL = 1e-3
THREADS = 2


def _count(block) -> int:
    """Ops of ``block``, those of nested If/Loop bodies included."""
    return sum(1 + sum(_count(b) for b in op.blocks) for op in block.operations)


def _on_device(block) -> int:
    """Ops inside Delegate ops of ``block`` (nested bodies included)."""
    n = 0
    for op in block.operations:
        if op.op_type == "Delegate":
            n += _count(op.attributes["fallback"])
        else:
            n += sum(_on_device(b) for b in op.blocks)
    return n


def _delegates(module) -> list:
    """Every bound delegate of the module, sub-plans' included (None when not reachable)."""
    plans = getattr(module, "_plans", None) or [module.method("forward")]
    return [d for m in plans for d in getattr(m, "_delegates", {}).values()]


def _spec_stats(module) -> tuple[int, float] | None:
    """(built, seconds) summed over the handles' specialization stats; None if not reachable."""
    built, seconds, found = 0, 0.0, False
    for d in _delegates(module):
        stats = getattr(getattr(d.handle, "specializations", None), "stats", None)
        if stats is not None:
            built, seconds, found = built + stats.built, seconds + stats.seconds, True
    return (built, seconds) if found else None


def _check(what: str, got: dict, want: dict, failures: list) -> None:
    if list(got) != list(want):
        failures.append(f"{what}: outputs {list(got)}, onnxruntime has {list(want)}")
        return
    for name, w in want.items():
        g = np.asarray(got[name])
        try:
            assert g.shape == w.shape, f"shape {g.shape} vs {w.shape}"
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        except AssertionError as e:
            failures.append(f"{what} output {name}: " + " ".join(str(e).split())[:300])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="*", help=f"fixture names (default: all of {fixtures.FIXTURES})")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default=None, help="the opencl `device` compile spec")
    parser.add_argument(
        "--cold-pocl",
        action="store_true",
        help="also give PoCL an empty kernel cache (POCL_CACHE_DIR): first runs then include PoCL's "
        "own compilation of each kernel for each new launch shape, as on a fresh machine",
    )
    args = parser.parse_args()
    # Before offload or pyopencl builds anything: an empty on-disk program cache for this process.
    os.environ["OFFLOAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="offload-bench-dynamic-cache-")
    atexit.register(shutil.rmtree, os.environ["OFFLOAD_CACHE_DIR"], ignore_errors=True)
    if args.cold_pocl:
        os.environ["POCL_CACHE_DIR"] = tempfile.mkdtemp(prefix="offload-bench-pocl-cache-")
        atexit.register(shutil.rmtree, os.environ["POCL_CACHE_DIR"], ignore_errors=True)
    import offload
    from offload.delegates.opencl import device as cl_device

    names = args.fixtures or fixtures.FIXTURES
    specs = {"opencl": {"device": args.device}} if args.device else None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.log_severity_level = 3

    started = time.perf_counter()
    rows, notes, failures = [], [], []
    spec_total = [0, 0.0]
    for name in names:
        path = fixtures.path(name)
        try:
            t0 = time.perf_counter()
            program = offload.load(path)
            lowered = offload.to_backend(program, "opencl", compile_specs=specs)
            t1 = time.perf_counter()
            module = offload.runtime.load(offload.save(lowered))
            t2 = time.perf_counter()
            on_cl = module.method("forward")
            on_cpu = offload.runtime.load(offload.save(program)).method("forward")
            session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        except Exception as e:
            notes.append(f"{name}: failed before running: {type(e).__name__}: {e}")
            failures.append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc()
            continue
        ops = f"{_on_device(lowered.main.body)}/{_count(program.main.body)}"
        info = on_cl.delegates
        fallen = [d for d in info if d.runs_on != "backend"]
        notes.append(
            f"{name}: lower {t1 - t0:.2f} s, load (init) {t2 - t1:.2f} s, {len(info)} opencl "
            f"delegate(s)" + (f", {len(fallen)} on the CPU fallback: {fallen[0].reason}" if fallen else "")
        )
        seen_warnings: set[str] = set()
        for case in range(fixtures.CASES[name]):
            shape = fixtures.case_id(name, case)
            feeds = fixtures.inputs(name, case, np.random.default_rng(1000 + case))
            what = f"{name} {shape}"
            try:
                want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    before = _spec_stats(module)
                    builds = cl_device.BUILD_STATS["built"]
                    start = time.perf_counter()
                    first = on_cl.run(feeds)
                    t_first = (time.perf_counter() - start) * 1e3
                    built = cl_device.BUILD_STATS["built"] - builds
                    after = _spec_stats(module)
                    t_steady = median_ms(on_cl.run, (feeds,), args.repeat)
                    steady = on_cl.run(feeds)
                t_ort = median_ms(session.run, (None, feeds), args.repeat)
                t_cpu = median_ms(on_cpu.run, (feeds,), args.repeat)
                _check(f"{what} opencl first run", first, want, failures)
                _check(f"{what} opencl steady", steady, want, failures)
                _check(f"{what} cpu executor", on_cpu.run(feeds), want, failures)
            except Exception as e:
                rows.append((name, shape, ops, "error", "", "", "", "", "", ""))
                notes.append(f"{what}: {type(e).__name__}: {' '.join(str(e).split())[:500]}")
                failures.append(f"{what}: {type(e).__name__}: {e}")
                continue
            flag = ""
            for w in caught:
                text = str(w.message)
                if text not in seen_warnings:
                    seen_warnings.add(text)
                    notes.append(f"{what}: warning: {text}")
                flag = "!"
            if fallen:
                flag = "!"
            spec_ms = "n/a"
            if before is not None and after is not None:
                spec_ms = f"{(after[1] - before[1]) * 1e3:.1f} ({after[0] - before[0]})"
            rows.append(
                (
                    name,
                    shape,
                    ops + flag,
                    f"{t_first:.1f}",
                    f"{t_steady:.2f}",
                    f"{t_cpu:.2f}",
                    f"{t_ort:.2f}",
                    f"{t_steady / t_ort:.2f}",
                    spec_ms,
                    str(built),
                )
            )
        stats = _spec_stats(module)
        if stats is not None:
            spec_total[0] += stats[0]
            spec_total[1] += stats[1]
            hits = sum(d.handle.specializations.stats.hits for d in _delegates(module) if d.handle)
            notes.append(
                f"{name}: specializations built {stats[0]}, hits {hits}, {stats[1]:.3f} s building them"
            )
        try:
            module.close()  # the handles' device memory, before the next model's
        except Exception as e:
            notes.append(f"{name}: module.close() failed: {type(e).__name__}: {e}")
            failures.append(f"{name}: module.close(): {type(e).__name__}: {e}")

    header = (
        "model", "shape", "ops on opencl", "first run ms", "steady ms", "CPU ms",
        "onnxruntime ms", "steady / ort", "spec ms (n)", "kernels built",
    )  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if k < 2 else "---:" for k in range(len(header))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(
        f"Specialization total: {spec_total[0]} specializations, {spec_total[1]:.3f} s "
        f"(handles' specializations.stats)"
    )
    print(
        f"Kernel programs: {cl_device.BUILD_STATS['built']} built from source in "
        f"{cl_device.BUILD_STATS['build_seconds']:.2f} s, {cl_device.BUILD_STATS['disk_hits']} from "
        f"the disk cache, {cl_device.BUILD_STATS['memory_hits']} in-process hits"
    )
    print(f"onnxruntime {ort.__version__}, {THREADS} intra-op threads; {args.repeat} repeats per median")
    for note in notes:
        print(f"- {note}")
    print(f"Total time: {time.perf_counter() - started:.1f} s")
    if failures:
        print("\nMismatches against onnxruntime (rtol = atol = 1e-3) and errors:")
        for f in failures:
            print(f"- {f}")
    assert not failures, f"{len(failures)} mismatch(es) against onnxruntime or error(s)"


if __name__ == "__main__":
    main()
