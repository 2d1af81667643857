"""Runs the cached corpus models through offload and compares each with its reference runtime.

Usage: python benchmarks/corpus/run.py [--only ID ...] [--no-opencl] [--no-passes] [--clock wall|cpu]
    [--timeout S] [--memory GIB] [--repeat N] [--json OUT.json] [--markdown OUT.md]

Models come from the cache benchmarks/corpus/fetch.py fills. Each model runs in its own process
under a time limit (--timeout, seconds) and an address-space limit (--memory, GiB), so that one
bad model cannot hang or sink the run. Per model it prints one row:

- load: ``offload.load`` of the file, ``ok`` or the error's first line.
- cpu: offload's CPU executor (``offload.save`` -> ``offload.runtime.load`` -> ``module.run``)
  against the reference runtime (onnxruntime's CPUExecutionProvider for ONNX, LiteRT's
  ``Interpreter`` for TFLite; a Core ML file against its ONNX twin's onnxruntime result), at every
  shape set of the manifest, twice over (a first run at new shapes runs the kernels, the next
  ones the plan made for them); ``ok`` or what differed. The program goes through
  ``offload.optimize``'s default passes first, as ``offload compile`` and
  ``offload.InferenceSession`` do (``--no-passes``: saved as imported).
- opencl: ``offload.to_backend(program, "opencl")`` saved, loaded with ``offload.runtime.load``
  and run at every shape set in that one module, twice over, against the same reference outputs.
- delegated: ops inside the ``offload::Delegate`` ops' fallback blocks / all other ops (as
  ``offload compile --backend`` counts them).
- ratio: offload CPU time / reference time per run at the first shape set, both in this process,
  alternating, after a warm-up round. ``--clock wall`` (default): median wall time, onnxruntime,
  LiteRT and OpenBLAS at 2 threads. ``--clock cpu``: the process CPU time per run, everything at
  one thread, the smallest of the rounds: it holds on a machine busy with other work, where wall
  times of multi-threaded runs do not.

Inputs are seeded: uniform in the manifest's ``ranges`` (default [-1, 1] for floats, [0, 10] for
integers, the full range for int8/uint8), ``values`` for fixed scalars (a sample rate). Outputs
match when, for each output, max |offload - reference| <= RTOL * max |reference| + ATOL for floats,
within one unit for int8/uint8 outputs, exactly for other integer and bool outputs. Stateful
models start from zero state at each shape set, in offload (``reset_state``) and the reference.
Where an ONNX model differs end to end, opwise.py runs each of its ops alone from onnxruntime's
own values of its inputs: when every op matches, the cell reads ``ok op by op`` with the end-to-end
difference and how far onnxruntime's default level is from its graph-as-written run (models that
re-quantize activations flip a rounding on float summation order and amplify it; see opwise.py);
the summary counts those apart from end-to-end matches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import opwise
from fetch import Entry, cache_dir, is_cached, model_path, read_manifest

RTOL = 1e-3  # of the output's largest magnitude: outputs like softmax hold values near 0
ATOL = 1e-5
THREADS = 2
PAUSE = 0.2  # seconds between timed calls: see benchmarks/common.py alternating_ms
RUNTIME = {"onnx": "onnxruntime", "tflite": "litert", "coreml": "onnxruntime"}


# ---- the worker: one model, in its own process ---------------------------------------------------


def first_line(err: BaseException, path: Path | None = None) -> str:
    """The error's type and first line, the cached model's folder left out."""
    text = str(err).strip().splitlines()
    line = text[0] if text else ""
    if path is not None:
        line = line.replace(str(path), path.name)
    return f"{type(err).__name__}: {line}"[:300]


def feeds_for(entry: Entry, ports: list[tuple[str, tuple, np.dtype]], shapes: dict, seed: int) -> dict:
    """Seeded inputs for ``ports`` (name, declared shape, dtype); ``shapes`` overrides shapes."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, declared, dtype in ports:
        shape = tuple(shapes.get(name, [d if isinstance(d, int) and d >= 0 else 1 for d in declared]))
        if name in entry.values:
            feeds[name] = np.full(shape, entry.values[name], dtype=dtype)
            continue
        if np.issubdtype(dtype, np.floating):
            lo, hi = entry.ranges.get(name, (-1.0, 1.0))
            feeds[name] = rng.uniform(lo, hi, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            info = np.iinfo(dtype)
            default = (info.min, info.max) if info.bits == 8 else (0, 10)
            lo, hi = entry.ranges.get(name, default)
            feeds[name] = rng.integers(lo, hi, shape, endpoint=True).astype(dtype)
    return feeds


class OnnxReference:
    """onnxruntime on the CPU with THREADS intra-op threads."""

    def __init__(self, path: Path):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = THREADS
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.path, self.plain = path, None
        self.output_names = [o.name for o in self.session.get_outputs()]

    def ports(self):
        kinds = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
                 "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
                 "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}  # fmt: skip
        return [
            (i.name, tuple(d if isinstance(d, int) else -1 for d in i.shape), np.dtype(kinds[i.type]))
            for i in self.session.get_inputs()
        ]

    def reset(self) -> None:
        pass  # an ONNX model's state is its inputs

    def run(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self.session.run(None, feeds)))

    def as_written(self, feeds: dict) -> dict:
        """onnxruntime without its graph optimizations (``ORT_DISABLE_ALL``): the graph's own
        arithmetic, where the default level fuses e.g. QDQ pairs into integer kernels."""
        import onnxruntime as ort

        if self.plain is None:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            opts.intra_op_num_threads = THREADS
            opts.log_severity_level = 3
            self.plain = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        return dict(zip(self.output_names, self.plain.run(None, feeds)))


class LiteRTReference:
    """LiteRT's interpreter with THREADS threads, made anew when the feeds' shapes change (XNNPack
    fails to reshape some models allocated at other shapes, e.g. their declared 1s); where XNNPack
    cannot prepare a shape at all, LiteRT's builtin kernels without it."""

    def __init__(self, path: Path):
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        def make(plain: bool = False):
            kind = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if plain else OpResolverType.AUTO
            return Interpreter(model_path=str(path), num_threads=THREADS, experimental_op_resolver_type=kind)

        self.make = make
        self.interp = make()
        self.shapes: dict[str, tuple] = {}

    def ports(self):
        return [
            (d["name"], tuple(int(x) for x in d["shape_signature"]), np.dtype(d["dtype"]))
            for d in self.interp.get_input_details()
        ]

    def reset(self) -> None:
        if self.shapes:
            self.interp.reset_all_variables()

    def _resized(self, shapes: dict, plain: bool):
        interp = self.make(plain)
        for d in interp.get_input_details():
            if tuple(d["shape"]) != shapes[d["name"]]:
                interp.resize_tensor_input(d["index"], shapes[d["name"]])
        interp.allocate_tensors()
        return interp

    def run(self, feeds: dict) -> dict:
        shapes = {d["name"]: feeds[d["name"]].shape for d in self.interp.get_input_details()}
        if shapes != self.shapes:
            try:
                self.interp = self._resized(shapes, plain=False)
            except RuntimeError:  # "XNNPack delegate failed to reshape runtime"
                self.interp = self._resized(shapes, plain=True)
            self.shapes = shapes
        for d in self.interp.get_input_details():
            self.interp.set_tensor(d["index"], feeds[d["name"]])
        self.interp.invoke()
        return {d["name"]: self.interp.get_tensor(d["index"]) for d in self.interp.get_output_details()}


def reference_for(entry: Entry, root: Path):
    if entry.reference:
        twin = next(e for e in read_manifest() if e.id == entry.reference)
        return reference_for(twin, root)
    path = model_path(entry, root)
    return OnnxReference(path) if entry.format == "onnx" else LiteRTReference(path)


def as_array(value) -> np.ndarray:
    """An output as an array (onnxruntime gives a ZipMap's output as a list of dicts)."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return np.array([[d[k] for k in sorted(d)] for d in value])
    return np.asarray(value)


def compare(got: dict, want: dict) -> str | None:
    """None when every output matches (see the module docstring), else what differed first.
    Outputs pair by name, else in the order of their sorted names (a Core ML file's Identity,
    Identity_1, … and its ONNX twin's StatefulPartitionedCall:0, :1, …, which onnxruntime lists
    in another order)."""
    if set(got) != set(want):
        if len(got) != len(want):
            return f"{len(got)} outputs, reference has {len(want)}"
        got = dict(zip(sorted(want), (got[k] for k in sorted(got))))
    for name, w in want.items():
        g, w = as_array(got[name]), as_array(w)
        if g.shape != w.shape:
            return f"{name}: shape {g.shape}, reference {w.shape}"
        if w.dtype.kind == "f":
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            if not np.array_equal(np.isfinite(g64), np.isfinite(w64)):
                return f"{name}: non-finite values differ"
            finite = np.isfinite(w64)
            err = float(np.abs(g64 - w64)[finite].max(initial=0.0))
            scale = float(np.abs(w64[finite]).max(initial=0.0))
            if err > RTOL * scale + ATOL:
                return f"{name}: max abs error {err:.3g} at output scale {scale:.3g}"
        elif w.dtype in (np.int8, np.uint8):
            err = int(np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0))
            if err > 1:
                return f"{name}: {err} units off"
        elif not np.array_equal(g, w):
            return f"{name}: {int((g != w).sum())} of {w.size} values differ"
    return None


def time_ratio(
    module, reference, feeds: dict, ref_feeds: dict, repeat: int, clock: str = "wall"
) -> tuple[float, float]:
    """(offload ms, reference ms) per run, the two alternating after a warm-up round. ``wall``: the
    median of ``repeat`` single runs' wall time. ``cpu``: the smallest of ``repeat`` batches'
    process CPU time per run (both sides at one thread), which a machine busy with other work
    barely changes: preemption stops the clock along with the run."""
    calls = [(module.run, feeds), (reference.run, ref_feeds)]
    for fn, f in calls:
        fn(f)
    times: list[list[float]] = [[], []]
    if clock == "cpu":
        start = time.process_time()
        module.run(feeds)
        batch = max(3, min(200, int(0.3 / max(time.process_time() - start, 1e-4))))
    for _ in range(repeat):
        for (fn, f), t in zip(calls, times):
            if clock == "cpu":
                start = time.process_time()
                for _ in range(batch):
                    fn(f)
                t.append((time.process_time() - start) / batch)
                continue
            time.sleep(PAUSE)
            start = time.perf_counter()
            fn(f)
            t.append(time.perf_counter() - start)
    pick = min if clock == "cpu" else statistics.median
    return pick(times[0]) * 1e3, pick(times[1]) * 1e3


def delegated_counts(program) -> tuple[int, int]:
    """(ops inside Delegate fallbacks, all ops but the Delegates), as ``offload compile`` counts."""
    ops = program.main.body.operations
    delegates = [op for op in ops if op.qualified_type == "offload::Delegate"]
    inside = sum(1 for d in delegates for _ in d.attributes["fallback"].walk())
    total = sum(1 for op in program.main.body.walk() if op.qualified_type != "offload::Delegate")
    return inside, total


def run_sets(module, feed_sets: list[dict], wants: list[dict], opwise_check=None) -> str:
    """``ok``, or what differed first. Where an ONNX model differs end to end, ``opwise_check(feeds)``
    (see opwise.py) decides: every op matching from onnxruntime's own inputs is ``ok op by op``, the
    end-to-end difference and onnxruntime's own spread between its optimization levels said with it."""
    by_op = None
    # twice over: the first run at a shape set runs its kernels, the next ones the plan it made
    sets = list(enumerate(zip(feed_sets, wants)))
    for i, (feeds, want) in sets + sets:
        module.reset_state()
        diff = compare(module.run(feeds), want)
        if not diff:
            continue
        diff = f"shape set {i + 1}: {diff}"
        if opwise_check is None:
            return diff
        ops, spread = opwise_check(feeds, want)
        if ops.differ:
            return f"{diff}; {ops.text()}"
        by_op = by_op or f"ok op by op: {ops.text()}; end to end {diff}{spread}"
    return by_op or "ok"


def matched(cell) -> bool:
    return isinstance(cell, str) and (cell == "ok" or cell.startswith("ok op by op"))


def work(
    entry: Entry, root: Path, opencl: bool, repeat: int, passes: bool = True, clock: str = "wall"
) -> None:
    """Measure one model, printing the row so far as a JSON line after each stage (the parent
    keeps the last line it got, so a stage that hangs or crashes still leaves the earlier ones)."""
    import offload
    import offload.runtime

    row: dict = {"id": entry.id, "format": entry.format, "runtime": RUNTIME[entry.format]}

    def emit() -> None:
        print(json.dumps(row), flush=True)

    path = model_path(entry, root)
    try:
        program = offload.load(str(path))
        row["load"] = "ok"
    except Exception as err:
        row["load"] = first_line(err, path)
        emit()
        return
    emit()
    states = set(program.main.states)  # kept by the loaded module between runs, not fed
    ports = [
        (v.name, tuple(v.type.shape), np.dtype(v.type.dtype.numpy))
        for v in program.main.inputs
        if v.name not in states
    ]
    sets = entry.shapes or [{}]
    feed_sets = [feeds_for(entry, ports, s, seed) for seed, s in enumerate(sets)]
    try:
        reference = reference_for(entry, root)
        ref_names = [p[0] for p in reference.ports()]
        # a Core ML file's inputs are named otherwise than its ONNX twin's: pair them by position
        rename = dict(zip([p[0] for p in ports], ref_names)) if entry.reference else {}
        ref_sets = [{rename.get(k, k): v for k, v in f.items()} for f in feed_sets]
        wants = []
        for f in ref_sets:
            reference.reset()
            wants.append(reference.run(f))
    except Exception as err:
        row["cpu"] = row["opencl"] = "reference failed: " + first_line(err, path)
        emit()
        return

    def opwise_check(backend: str | None):
        if entry.format != "onnx":
            return None

        def check(feeds: dict, want: dict):
            ops = opwise.check(path, feeds, compare, backend)
            spread = compare(reference.as_written(feeds), want)
            return ops, f" (onnxruntime as written against its default level: {spread or 'the same'})"

        return check

    try:
        module = offload.runtime.load(offload.save(offload.optimize(program) if passes else program))
        row["cpu"] = run_sets(module, feed_sets, wants, opwise_check(None))
    except Exception as err:
        row["cpu"] = first_line(err, path)
        module = None
    emit()
    if module is not None:
        try:
            reference.reset()
            module.reset_state()
            ours, theirs = time_ratio(module, reference, feed_sets[0], ref_sets[0], repeat, clock)
            row.update(offload_ms=ours, reference_ms=theirs, ratio=ours / theirs)
        except Exception as err:
            row["timing"] = first_line(err, path)
        emit()
    if not opencl:
        return
    try:
        lowered = offload.to_backend(program, "opencl")
        inside, total = delegated_counts(lowered)
        row.update(delegated=inside, ops=total)
        emit()
        gpu = offload.runtime.load(offload.save(lowered))
        row["opencl"] = run_sets(gpu, feed_sets, wants, opwise_check("opencl"))
    except Exception as err:
        row["opencl"] = first_line(err, path)
    emit()


# ---- the parent: one process per model, the table, the summary -----------------------------------


def limited(memory_gib: float):
    def apply() -> None:
        os.nice(10)
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def measure(entry: Entry, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        entry.id,
        "--repeat",
        str(args.repeat),
        "--clock",
        args.clock,
    ]
    if args.no_opencl:
        cmd.append("--no-opencl")
    if args.no_passes:
        cmd.append("--no-passes")
    if args.dir:
        cmd += ["--dir", str(args.dir)]
    threads = str(1 if args.clock == "cpu" else THREADS)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads)
    row = {"id": entry.id, "format": entry.format, "runtime": RUNTIME[entry.format]}
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, env=env,
            preexec_fn=limited(args.memory),
        )  # fmt: skip
        out, failure = done.stdout, None if done.returncode == 0 else f"exit status {done.returncode}"
        if done.returncode != 0:
            tail = [line for line in done.stderr.strip().splitlines() if line.strip()]
            failure += f" ({tail[-1][:200]})" if tail else ""
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        failure = f"timed out after {args.timeout} s"
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if lines:
        row.update(json.loads(lines[-1]))
    if failure:
        for stage in ("load", "cpu", "opencl"):
            if stage not in row and not (stage == "opencl" and args.no_opencl):
                row[stage] = failure
                break
    return row


def cell(value, width: int) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def print_row(r: dict) -> None:
    deleg = f"{r['delegated']}/{r['ops']}" if "ops" in r else "-"
    ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
    print(
        f"{cell(r['id'], 40):40s} {r['format']:6s} {cell(r.get('load'), 28):28s} {cell(r.get('cpu'), 28):28s} "
        f"{cell(r.get('opencl'), 28):28s} {deleg:>10s} {ratio:>6s}",
        flush=True,
    )


def print_failures(rows: list[dict]) -> None:
    """Each stage that did not give ``ok``, in full."""
    failed = [(r["id"], stage, r[stage]) for r in rows for stage in ("load", "cpu", "opencl", "timing")
              if r.get(stage, "ok") != "ok"]  # fmt: skip
    if failed:
        print("\nnot ok:")
    for model, stage, text in failed:
        print(f"  {model} [{stage}] {text}")


def markdown(rows: list[dict], lines: list[str]) -> str:
    """The rows as a Markdown table (full error lines), then the summary lines."""
    out = [
        "| id | format | load | cpu | opencl | delegated | offload ms | reference ms | ratio |",
        "|" + " --- |" * 9,
    ]
    for r in rows:
        deleg = (
            f"{r['delegated']}/{r['ops']} ({100 * r['delegated'] / r['ops']:.0f}%)" if r.get("ops") else "-"
        )
        ms = [f"{r[k]:.2f}" if k in r else "-" for k in ("offload_ms", "reference_ms")]
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        cells = [
            r["id"],
            r["format"],
            r.get("load", "-"),
            r.get("cpu", "-"),
            r.get("opencl", "-"),
            deleg,
            *ms,
            ratio,
        ]
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out + [""] + [f"- {line}" for line in lines]) + "\n"


def summary(rows: list[dict], opencl: bool) -> list[str]:
    n = len(rows)
    well = sum(1 for r in rows if "ops" in r and r["ops"] and r["delegated"] / r["ops"] >= 0.9)

    def matches(stage: str) -> str:
        ends = sum(r.get(stage) == "ok" for r in rows)
        ops = sum(matched(r.get(stage)) for r in rows) - ends
        return f"{ends + ops}" + (f" ({ends} end to end, {ops} op by op)" if ops else "")

    lines = [
        f"models {n}: loads {sum(r.get('load') == 'ok' for r in rows)}, CPU matches {matches('cpu')}"
        + (f", opencl matches {matches('opencl')}, >=90% delegated {well}" if opencl else "")
    ]
    for runtime in ("onnxruntime", "litert"):
        ratios = [
            r["ratio"] for r in rows if r["runtime"] == runtime and matched(r.get("cpu")) and "ratio" in r
        ]
        if ratios:
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            lines.append(
                f"offload CPU / {runtime} time, geometric mean over {len(ratios)} matching models: {geo:.2f}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="ID", help="run these ids only (repeatable)")
    parser.add_argument("--no-opencl", action="store_true", help="skip the opencl lowering")
    parser.add_argument(
        "--no-passes",
        action="store_true",
        help="save the CPU .pte as imported (default: offload.optimize's passes first)",
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: median wall time, 2 threads a side; cpu: process CPU time per run, 1 thread a side",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per model (default 300)")
    parser.add_argument(
        "--memory", type=float, default=12, help="address-space limit per model, GiB (default 12)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the rows and summary as JSON")
    parser.add_argument(
        "--markdown", type=Path, metavar="OUT", help="write the rows and summary as a Markdown table"
    )
    parser.add_argument(
        "--dir", type=Path, help="cache folder (default $OFFLOAD_CORPUS_DIR or ~/.cache/offload-corpus)"
    )
    parser.add_argument("--worker", metavar="ID", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = args.dir or cache_dir()
    entries = read_manifest()
    if args.worker:
        entry = next(e for e in entries if e.id == args.worker)
        if args.clock == "cpu":
            global THREADS
            THREADS = 1
        work(entry, root, not args.no_opencl, args.repeat, not args.no_passes, args.clock)
        return 0
    chosen = [e for e in entries if not args.only or e.id in args.only]
    unknown = sorted(set(args.only or ()) - {e.id for e in entries})
    if unknown:
        parser.error(f"no model {', '.join(unknown)} in the manifest")
    present = [e for e in chosen if is_cached(e, root)]
    if not present:
        print(f"no corpus models in {root / 'models'}: python benchmarks/corpus/fetch.py", file=sys.stderr)
        return 1
    if len(present) < len(chosen):
        print(f"{len(chosen) - len(present)} model(s) not fetched; running the {len(present)} that are")
    print(
        f"{'id':40s} {'format':6s} {'load':28s} {'cpu':28s} {'opencl':28s} {'delegated':>10s} {'ratio':>6s}"
    )
    rows = []
    for e in present:
        try:
            row = measure(e, args)
        except Exception:
            row = {
                "id": e.id,
                "format": e.format,
                "runtime": RUNTIME[e.format],
                "load": traceback.format_exc(limit=1),
            }
        rows.append(row)
        print_row(row)
    print_failures(rows)
    lines = summary(rows, not args.no_opencl)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": lines}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(rows, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
