"""What the default graph-pass pipeline does to real models: op counts, arena, latency.

Usage: python benchmarks/passes.py [--repeat N] [--no-opencl] [--device SPEC] [MODEL.onnx ...]
Without models it takes ONNX's bundled ResNet-50 light model and the fixtures of tests/models
(their first shape case). Per model it runs ``offload.optimize(program)`` (the default
pipeline, offload.passes.DEFAULT) and prints, before and after:

- ops: the number of ops of the program (nested bodies included), and the op types whose
  count changed (below the table);
- arena / unshared: the CPU .pte method's arena bytes against the sum of the bytes its planned
  tensors take unshared (``Method.arena_bytes / Method.planned_bytes``), and the arena in MB;
- cpu ms, opencl ms: the median run time of offload's CPU executor (.pte) and of the program
  lowered to the ``opencl`` backend, each with its ratio to onnxruntime on the original model
  (lower is better for offload), and the largest difference from onnxruntime's outputs.

On a machine without a GPU the opencl device is PoCL on the CPU cores.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from common import median_ms  # benchmarks/common.py (run as a script)

import offload

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.models import fixtures  # the repository root, on sys.path above

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _counts(program) -> collections.Counter:
    return collections.Counter(op.op_type for fn in program.functions.values() for op in fn.body.walk())


def _feeds(path: str, program) -> dict[str, np.ndarray]:
    name = os.path.basename(path)[: -len(".onnx")]
    if name in fixtures.FIXTURES and os.path.dirname(os.path.abspath(path)) == fixtures.HERE:
        return fixtures.inputs(name, 0, np.random.default_rng(0))
    from common import inputs

    return inputs(program)


def _max_error(got: dict, want: list) -> float:
    return max(
        float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)), initial=0.0))
        for g, w in zip(got.values(), want)
    )


def _measure(program, feeds, want, repeat: int, opencl: bool, specs) -> dict:
    """Arena figures, CPU and opencl timings and errors of one program."""
    method = offload.runtime.load(offload.save(program)).method("forward")
    out = {
        "ops": sum(_counts(program).values()),
        "arena": method.arena_bytes,
        "planned": method.planned_bytes,
        "cpu_ms": median_ms(method.run, (feeds,), repeat),
        "cpu_err": _max_error(method.run(feeds), want),
        "cl_ms": None,
        "cl_err": None,
    }
    if opencl:
        try:
            lowered = offload.to_backend(program, "opencl", compile_specs=specs)
            on_cl = offload.runtime.load(offload.save(lowered)).method("forward")
            out["cl_ms"] = median_ms(on_cl.run, (feeds,), repeat)
            out["cl_err"] = _max_error(on_cl.run(feeds), want)
        except offload.errors.OffloadError as e:
            print(f"  opencl: {e}", file=sys.stderr)
    return out


def _share(m: dict) -> str:
    """Arena over unshared bytes; '-' where nothing is planned ahead (symbolic shapes)."""
    return f"{m['arena'] / m['planned']:.2f}" if m["planned"] else "-"


def _ms(t: float | None, ort_ms: float) -> str:
    return "-" if t is None else f"{t:.1f} ({t / ort_ms:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-opencl", action="store_true", help="time the CPU executor only")
    parser.add_argument("--device", default=None, help="the opencl `device` compile spec")
    args = parser.parse_args()
    models = args.models or [
        os.path.join(LIGHT, "light_resnet50.onnx"),
        *(fixtures.path(n) for n in fixtures.FIXTURES),
    ]
    specs = {"opencl": {"device": args.device}} if args.device else None
    os.environ.setdefault("OFFLOAD_CACHE_DIR", tempfile.mkdtemp(prefix="offload-bench-cache-"))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.log_severity_level = 3
    header = (
        f"{'model':22s} {'ops':>11s} {'arena/unshared':>15s} {'arena MB':>13s} {'ort ms':>7s} "
        f"{'cpu ms (/ort) before':>21s} {'after':>14s} {'opencl ms (/ort) before':>24s} {'after':>14s}"
    )
    print(header)
    changes = []
    for path in models:
        name = os.path.basename(path)[: -len(".onnx")]
        program = offload.load(path)
        optimized = offload.optimize(program)
        feeds = _feeds(path, program)
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
        ort_ms = median_ms(session.run, (None, feeds), args.repeat)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            before = _measure(program, feeds, want, args.repeat, not args.no_opencl, specs)
            after = _measure(optimized, feeds, want, args.repeat, not args.no_opencl, specs)
        ratio = f"{_share(before)}->{_share(after)}"
        mb = f"{before['arena'] / 1e6:.3g}->{after['arena'] / 1e6:.3g}"
        print(
            f"{name:22s} {before['ops']:>5d}->{after['ops']:<5d} {ratio:>15s} {mb:>13s} {ort_ms:7.1f} "
            f"{_ms(before['cpu_ms'], ort_ms):>21s} {_ms(after['cpu_ms'], ort_ms):>14s} "
            f"{_ms(before['cl_ms'], ort_ms):>24s} {_ms(after['cl_ms'], ort_ms):>14s}"
        )
        c0, c1 = _counts(program), _counts(optimized)
        delta = {k: (c0[k], c1[k]) for k in sorted(set(c0) | set(c1)) if c0[k] != c1[k]}
        errors = ", ".join(
            f"{k} {before[k]:.1e}->{after[k]:.1e}" for k in ("cpu_err", "cl_err") if before[k] is not None
        )
        changes.append(
            f"{name}: " + (", ".join(f"{k} {a}->{b}" for k, (a, b) in delta.items()) or "no change")
        )
        changes.append(f"{' ' * len(name)}  max |offload - onnxruntime|: {errors}")
    print()
    print("op types whose count changed, and the largest output difference from onnxruntime:")
    print("\n".join(changes))


if __name__ == "__main__":
    main()
