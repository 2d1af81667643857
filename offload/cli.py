"""The `offload` command line: compile a model to .pte, run it, inspect it."""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import time
import warnings

import numpy as np

import offload
from offload.errors import OffloadError
from offload.files import replace_file
from offload.frontends import sniff
from offload.ir import DataType, TensorType
from offload.profile import Profile, profiling
from offload.progress import Progress

_EPILOG = """\
examples:
  offload compile model.onnx -o model.pte
  offload compile model.onnx -o model.pte --passes cleanup::const_elimination,cleanup::dead_code_elimination
  offload inspect model.onnx --passes
  offload run model.pte --input image=image.npy --output out.npz
  offload inspect model.pte
  offload backends
"""


# What `offload compile` runs when neither --passes nor --no-passes is given: the default
# pipeline (offload.passes.DEFAULT), which keeps every ONNX conformance case passing.
DEFAULT_PASSES = "default"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="offload",
        description="Compile trained models to .pte files and run them through backend delegates.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"offload {offload.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    comp = sub.add_parser("compile", help="import a model and write it as a .pte file")
    comp.add_argument("model", help="model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)")
    comp.add_argument("-o", "--output", required=True, metavar="OUT.pte", help="where to write the .pte file")
    chosen = comp.add_mutually_exclusive_group()
    chosen.add_argument(
        "--passes",
        metavar="NAMES",
        help="graph passes to run first: 'default', or pass names group::name separated by commas "
        f"(default: {DEFAULT_PASSES!r}; see docs/passes.md)",
    )
    chosen.add_argument("--no-passes", action="store_true", help="run no graph passes")
    _partition_arguments(comp)
    comp.add_argument(
        "--spec",
        action="append",
        default=[],
        metavar="NAME.key=value",
        help="a compile spec for backend NAME (repeatable)",
    )
    comp.add_argument(
        "--calibrate",
        metavar="DIR",
        help="sample inputs (.npz of named inputs, or .npy for a model of one input): the ranges its "
        "values take decide what precision=fp16 keeps float32, and each fp16 delegate's error is measured",
    )
    comp.add_argument(
        "--input-range",
        action="append",
        default=[],
        metavar="NAME=LO,HI",
        help="bounds of an input's values, from which ranges are proven for precision=fp16 (repeatable)",
    )

    run = sub.add_parser(
        "run", help="run a .pte file (or a model, compiled in memory) and summarize its outputs"
    )
    run.add_argument(
        "model", help=".pte file or model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)"
    )
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input from a .npy file (repeatable)",
    )
    run.add_argument("--output", metavar="OUT.npz", help="write all outputs to this .npz file")
    run.add_argument("--method", default=None, help="method to run (default: the first, 'forward')")
    run.add_argument(
        "--seed", type=int, default=0, help="seed for the random inputs made for inputs not given"
    )
    run.add_argument(
        "--strict",
        action="store_true",
        help="fail when a delegate's backend cannot run here (instead of running its CPU fallback)",
    )
    run.add_argument(
        "--profile",
        metavar="TRACE.json",
        help="profile the run (after one warm-up run): write Chrome trace events, print the top entries",
    )
    run.add_argument("--timeout", type=float, metavar="SECONDS", help="stop the run past this many seconds")
    run.add_argument(
        "--input-dir",
        metavar="DIR",
        help="run once per .npz/.npy file in DIR (one sample each: an .npz of named inputs, or an .npy "
        "for a model of one input) and write one .npz of outputs per file to --output-dir",
    )
    run.add_argument("--output-dir", metavar="DIR", help="where --input-dir's outputs go")
    run.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run --input-dir's files as a Ray Data job: 'local' starts a local cluster, else a "
        "cluster address (needs offload[ray])",
    )
    run.add_argument("--batch-size", type=int, default=32, help="rows per Ray batch (with --ray)")

    rep = sub.add_parser(
        "report", help="the delegation report of a model: where each op runs and why, as HTML with a picture"
    )
    rep.add_argument("model", help="model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)")
    rep.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="where to write the report")
    rep.add_argument("--json", action="store_true", help="write the report's data as JSON instead of HTML")
    rep.add_argument("--no-measure", action="store_true", help="do not run the model to measure it")
    rep.add_argument(
        "--spec",
        action="append",
        default=[],
        metavar="NAME.key=value",
        help="a compile spec for backend NAME (repeatable)",
    )
    _partition_arguments(rep)

    ins = sub.add_parser("inspect", help="print methods, inputs/outputs, op counts, constant and arena bytes")
    ins.add_argument(
        "model", help=".pte file or model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)"
    )
    ins.add_argument("--ir", action="store_true", help="also print a model's IR as text (model files only)")
    ins.add_argument(
        "--passes",
        action="store_true",
        help="run the default pass pipeline first and print op counts before / after and what each "
        "pass changed (model files only)",
    )
    _partition_arguments(ins)

    sub.add_parser(
        "backends", help="list the backends installed here: availability, devices, the ops each takes"
    )
    return p


def _partition_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that choose what runs on backend delegates (compile, and inspect of a model)."""
    p.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="delegate the ops this backend takes (repeatable, in priority order)",
    )
    p.add_argument(
        "--deny-op", action="append", default=[], metavar="OpType", help="keep this op type on the CPU"
    )
    p.add_argument(
        "--deny-node", action="append", default=[], metavar="NAME", help="keep this node on the CPU"
    )
    p.add_argument("--min-ops", type=int, default=1, metavar="N", help="smallest partition worth delegating")


def _pass_choice(args):
    """What ``offload.optimize`` runs for the compile flags: 'none', 'default' or a list of names."""
    if args.no_passes:
        return "none"
    if args.passes is None:
        return DEFAULT_PASSES
    if args.passes in ("default", "none"):
        return args.passes
    names = [n.strip() for n in args.passes.split(",") if n.strip()]
    if not names:
        raise OffloadError("--passes expects 'default' or pass names group::name separated by commas")
    return names


def _optimized(program, passes, progress: Progress):
    """``program`` after ``passes``, and the PassRecords of the run."""
    records: list = []
    if passes == "none":
        return program, records
    with progress.step("running graph passes"):
        return offload.optimize(program, passes, records=records), records


def _pass_report(records) -> list[str]:
    """Op counts per op type before and after, then each pass run that changed the program."""
    if not records:
        return ["passes: none ran"]
    before, after = records[0].before, records[-1].after
    seconds = sum(r.seconds for r in records)
    lines = [
        f"passes: {len({r.name for r in records})} passes, {records[-1].round} round(s), "
        f"{seconds * 1e3:.1f} ms; ops {sum(before.values())} -> {sum(after.values())}"
    ]
    kinds = sorted(set(before) | set(after), key=lambda k: (-before[k], -after[k], k))
    rows = [("op", "before", "after")] + [(k, str(before[k]), str(after[k])) for k in kinds]
    lines += ["  op counts:", *_table(rows)]
    changed = [r for r in records if r.changed]
    lines.append(f"  passes that changed the program: {len(changed)}")
    for r in changed:
        delta = ", ".join(f"{k} {d:+d}" for k, d in r.delta().items()) or "no op count changed"
        lines.append(f"    round {r.round}  {r.name}: {delta}  ({r.seconds * 1e3:.1f} ms)")
    return lines


def _partitioner(args):
    """The Partitioner the flags describe, or None without --backend."""
    if not args.backend:
        if args.deny_op or args.deny_node or getattr(args, "spec", None) or args.min_ops != 1:
            raise OffloadError("--spec, --deny-op, --deny-node and --min-ops need --backend NAME")
        return None
    from offload.partitioner import Partitioner

    return Partitioner(args.backend, deny_ops=args.deny_op, deny_nodes=args.deny_node, min_ops=args.min_ops)


def _compile_specs(items: list[str]) -> dict[str, dict[str, str]]:
    """``NAME.key=value`` flags → {backend name: {key: value}}."""
    specs: dict[str, dict[str, str]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        name, dot, key = target.partition(".")
        if not sep or not dot or not name or not key:
            raise OffloadError(f"--spec expects NAME.key=value, got '{item}'")
        specs.setdefault(name, {})[key] = value
    return specs


def _delegated(program, partitioner, specs=None, calibration=None):
    from offload.api import to_backend

    # the chosen passes already ran
    return to_backend(program, partitioner, specs, passes="none", calibration=calibration)


MAX_CALIBRATION_FILES = 1000


def _calibration(folder: str, program) -> list[dict]:
    """--calibrate DIR: one sample per .npz/.npy file, in name order."""
    if not os.path.isdir(folder):
        raise OffloadError(f"--calibrate {folder}: not a folder")
    files = sorted(f for f in os.listdir(folder) if f.endswith((".npz", ".npy")))
    if not files:
        raise OffloadError(f"--calibrate {folder}: no .npz or .npy files")
    if len(files) > MAX_CALIBRATION_FILES:
        raise OffloadError(f"--calibrate {folder}: {len(files)} files; at most {MAX_CALIBRATION_FILES}")
    names = [v.name for v in program.main.inputs]
    out = []
    for f in files:
        sample = _read_sample(os.path.join(folder, f), names)
        missing = sorted(set(names) - set(sample))
        if missing:
            raise OffloadError(f"{os.path.join(folder, f)}: no array for input(s) {', '.join(missing)}")
        out.append(sample)
    return out


def _input_ranges(items: list[str], program) -> dict[str, tuple[float, float]]:
    """--input-range NAME=LO,HI flags."""
    names = {v.name for v in program.main.inputs}
    out = {}
    for item in items:
        name, _, bounds = item.partition("=")
        try:
            lo, hi = (float(b) for b in bounds.split(","))
        except ValueError:
            raise OffloadError(f"--input-range expects NAME=LO,HI, got '{item}'") from None
        if name not in names:
            raise OffloadError(
                f"--input-range {item}: the model has no input '{name}' (it has {sorted(names)})"
            )
        if not lo <= hi:
            raise OffloadError(f"--input-range {item}: LO must not exceed HI")
        out[name] = (lo, hi)
    return out


def _is_pte(path: str) -> bool:
    if os.path.isdir(path):  # a model folder: an .mlpackage or an nnpackage
        return False
    if not os.path.isfile(path):
        raise OffloadError(f"{path}: no such file")
    with open(path, "rb") as f:
        return sniff(f.read(8)) == "pte"


def _module(
    path: str, progress: Progress, strict: bool = False, partitioner=None, on_import=None, prepare=None
):
    """The runtime Module of a .pte file, or of a model compiled in memory (rewritten by
    ``prepare`` and then delegated by ``partitioner`` when given; ``on_import`` sees the program
    before delegation)."""
    if _is_pte(path):
        if partitioner is not None:
            raise OffloadError(f"{path}: --backend needs a model file; a .pte file is already compiled")
        if prepare is not None:
            raise OffloadError(f"{path}: --passes needs a model file; a .pte file is already compiled")
        with progress.step(f"loading {path}"):
            return offload.runtime.load(path, strict=strict), None
    with progress.step(f"importing {path}"):
        program = offload.load(path)
    if prepare is not None:
        program = prepare(program)
    if on_import is not None:
        on_import(program)
    if partitioner is not None:
        with progress.step("delegating to " + ", ".join(b.name for b in partitioner.backends)):
            program = _delegated(program, partitioner)
    with progress.step("lowering to .pte"):
        data = offload.save(program)
    with progress.step("loading"):
        return offload.runtime.load(data, strict=strict), program


def _random_input(port, rng: np.random.Generator) -> np.ndarray:
    t = port.type
    if not isinstance(t, TensorType) or t.shape is None:
        raise OffloadError(
            f"input '{port.name}' has no declared shape; pass it with --input {port.name}=FILE.npy"
        )
    shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
    dt = t.dtype.numpy
    if t.dtype == DataType.BOOL:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 10, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _inputs(method, given: list[str], seed: int) -> dict[str, np.ndarray]:
    feeds = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep:
            raise OffloadError(f"--input expects NAME=FILE.npy, got '{item}'")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise OffloadError(f"--input {name}: cannot read '{path}': {e}") from None
    rng = np.random.default_rng(seed)
    for port in method.inputs:
        if port.name not in feeds:
            feeds[port.name] = _random_input(port, rng)
    return feeds


def _summary(name: str, value) -> str:
    if isinstance(value, list):
        return f"{name}: sequence of {len(value)}"
    a = np.asarray(value)
    line = f"{name}: {a.dtype}{list(a.shape)}"
    if a.size and a.dtype.kind in "fiub":
        f = a.astype(np.float64)
        line += f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}"
        if a.ndim == 2 and a.shape[0] == 1:
            line += f"  argmax {int(f.argmax())}"
    return line


def _print_fp16_errors(reference, fp16, seed: int) -> None:
    """add_fp16_cast's error per output against the float32 program, on seeded random inputs
    (symbolic dims as 1)."""
    from offload.passes.quantization.add_fp16_cast import output_errors

    rng = np.random.default_rng(seed)
    feeds = {}
    for v in reference.main.inputs:
        port = offload.runtime.module.Port(v.name, v.type)
        feeds[v.name] = _random_input(port, rng)
    for name, e in output_errors(reference, fp16, feeds).items():
        print(
            f"float16 error of '{name}' against float32: max abs {e['max_abs']:.3g}, max rel {e['max_rel']:.3g}"
        )


def _compile(args, progress: Progress) -> int:
    partitioner = _partitioner(args)
    _unavailable(partitioner)
    specs = _compile_specs(args.spec)
    passes = _pass_choice(args)
    with progress.step(f"importing {args.model}"):
        program = offload.load(args.model)
    original = program
    program, records = _optimized(program, passes, progress)
    if records:
        before, after = records[0].before, records[-1].after
        changed = len({r.name for r in records if r.changed})
        print(
            f"graph passes: {sum(before.values())} -> {sum(after.values())} ops ({changed} passes changed it)"
        )
    if any(r.name == "quantization::add_fp16_cast" and r.changed for r in records):
        _print_fp16_errors(original, program, seed=0)
    if (args.calibrate or args.input_range) and partitioner is None:
        raise OffloadError("--calibrate and --input-range need --backend NAME")
    if args.input_range:
        program = offload.calibrate(program, input_ranges=_input_ranges(args.input_range, program))
    samples = _calibration(args.calibrate, program) if args.calibrate else None
    if partitioner is not None:
        with progress.step("delegating to " + ", ".join(args.backend)):
            program = _delegated(program, partitioner, specs, samples)
        delegates = [op for op in program.main.body.operations if op.qualified_type == "offload::Delegate"]
        ops = [op for op in program.main.body.walk() if op.qualified_type != "offload::Delegate"]
        inside = sum(1 for d in delegates for _ in d.attributes["fallback"].walk())
        print(
            f"delegated {inside}/{len(ops)} ops in {len(delegates)} partition(s) to {', '.join(args.backend)}"
        )
    with progress.step(f"writing {args.output}"):
        offload.save(program, args.output)
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes)")
    return 0


def _run(args, progress: Progress) -> int:
    if args.input_dir or args.output_dir or args.ray:
        return _run_files(args, progress)
    if args.timeout is not None and not args.timeout > 0:
        raise OffloadError(f"--timeout takes a positive number of seconds, got {args.timeout}")
    # A profile records the load too (kernel builds, shapes planned at init) on its own event,
    # then one profiled run after an unrecorded warm-up run.
    profile = Profile() if args.profile else None
    with profiling(profile), profile.span("load", "load") if profile else contextlib.nullcontext():
        module, _ = _module(args.model, progress, strict=args.strict)
    method = module.method(args.method) if args.method else module.method(module.method_names[0])
    feeds = _inputs(method, args.input, args.seed)
    options = offload.runtime.RunOptions(timeout=args.timeout) if args.timeout is not None else None
    if profile is not None:
        method.run(feeds, options)  # new shapes' specializations are not what the run's profile is for
    start = time.perf_counter()
    outputs = method.run(feeds, options, profile)
    elapsed = time.perf_counter() - start
    for name, value in outputs.items():
        print(_summary(name, value))
    print(f"ran '{method.name}' in {elapsed * 1e3:.1f} ms" + _placement(method.delegates))
    if profile is not None:
        profile.write(args.profile)
        print(profile.summary())
        print(f"wrote {args.profile} ({len(profile.events)} events; open it in Perfetto or chrome://tracing)")
    module.close()
    if args.output:
        np.savez(args.output, **{k: np.asarray(v) for k, v in outputs.items() if not isinstance(v, list)})
        print(f"wrote {args.output}")
    return 0


def _sample(path: str, method) -> dict[str, np.ndarray]:
    """One input file: an .npz of named inputs, or an .npy for a method of one input."""
    return _read_sample(path, [p.name for p in method.inputs])


def _read_sample(path: str, names: list[str]) -> dict[str, np.ndarray]:
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as data:
                return {n: data[n] for n in data.files}
        if len(names) != 1:
            raise OffloadError(f"{path}: an .npy file feeds a model of one input; this one takes {names}")
        return {names[0]: np.load(path, allow_pickle=False)}
    except (OSError, ValueError) as e:
        raise OffloadError(f"{path}: not a readable .npy/.npz file: {e}") from None


def _run_files(args, progress: Progress) -> int:
    """--input-dir: every file of the folder through the method (a local loop, or Ray Data)."""
    if not (args.input_dir and args.output_dir):
        raise OffloadError("--input-dir and --output-dir go together (and --ray needs both)")
    files = sorted(f for f in os.listdir(args.input_dir) if f.endswith((".npz", ".npy")))
    if not files:
        raise OffloadError(f"{args.input_dir}: no .npz or .npy files")
    os.makedirs(args.output_dir, exist_ok=True)
    module, _ = _module(args.model, progress, strict=args.strict)
    method = module.method(args.method) if args.method else module.method(module.method_names[0])
    samples = [_sample(os.path.join(args.input_dir, f), method) for f in files]
    start = time.perf_counter()
    if args.ray:
        results = _run_on_ray(args, module, method, samples)
    else:
        results = [method.run(s) for s in progress.items(samples, f"running {len(samples)} files")]
    elapsed = time.perf_counter() - start
    for name, outputs in zip(files, results):
        np.savez(os.path.join(args.output_dir, os.path.splitext(name)[0] + ".npz"), **outputs)
    where = f"on Ray ({args.ray})" if args.ray else "here"
    print(f"ran '{method.name}' on {len(files)} files {where} in {elapsed:.2f} s; wrote {args.output_dir}")
    return 0


def _run_on_ray(args, module, method, samples: list[dict]) -> list[dict]:
    """The samples as rows (each input without its batch axis of 1) of a Ray dataset."""
    import offload.ray as offload_ray

    offload_ray._require_ray()
    import ray

    rows = []
    for k, sample in enumerate(samples):
        row = {"__row__": k}
        for p in method.inputs:
            x = sample.get(p.name)
            if x is None or x.ndim == 0 or x.shape[0] != 1:
                raise OffloadError(
                    f"--ray: each file holds one sample (a batch axis of 1) of input '{p.name}'"
                )
            row[p.name] = x[0]
        rows.append(row)
    if args.model.endswith(".pte"):
        with open(args.model, "rb") as f:
            data = f.read()
    else:
        raise OffloadError("--ray runs a .pte file: compile the model first (offload compile)")
    started = not ray.is_initialized()  # a caller's cluster (e.g. in a notebook) is used as is
    if started:
        ray.init(
            address=None if args.ray == "local" else args.ray, include_dashboard=False, log_to_driver=False
        )
    try:
        out = offload_ray.batch_inference(
            ray.data.from_items(rows), data, batch_size=args.batch_size, method=method.name
        ).take_all()
    finally:
        if started:
            ray.shutdown()
    out.sort(key=lambda r: int(r["__row__"]))
    return [{k: np.asarray(v)[None] for k, v in r.items() if k != "__row__"} for r in out]


def _report(args, progress: Progress) -> int:
    from offload import report

    partitioner = _partitioner(args)
    if partitioner is None:
        raise OffloadError("offload report needs --backend NAME: the backend whose partitions it shows")
    with progress.step(f"importing {args.model}"):
        program = offload.load(args.model)
    with progress.step("partitioning" + ("" if args.no_measure else " and measuring")):
        data = report.build(program, partitioner, _compile_specs(args.spec), measure=not args.no_measure)
    text = report.to_json(data) if args.json else report.render_html(data)
    replace_file(args.output, text.encode())
    s = data["summary"]
    print(f"delegated {s['delegated_ops']}/{s['ops']} ops in {s['partitions']} partition(s)")
    for r in data["reasons"]:
        print(f"  {r['count']:>4} on the cpu: {r['reason']}")
    print(f"wrote {args.output}")
    return 0


def _placement(delegates) -> str:
    """Where a run went: the CPU, or which delegates ran on their backend, and which ran on the
    CPU because their backend cannot run here."""
    if not delegates:
        return " on cpu"
    on = collections.Counter(d.backend for d in delegates if d.runs_on == "backend")
    off = collections.Counter(d.backend for d in delegates if d.runs_on != "backend")
    parts = [f"on {name} x{n}" for name, n in on.items()]
    parts += [f"on the CPU: {name} (cpu fallback) x{n}, {name} cannot run here" for name, n in off.items()]
    return " with delegates " + "; ".join(parts)


def _unavailable(partitioner) -> None:
    """Before a placement table: say plainly which chosen backends cannot run on this machine
    (their partitions would run on the CPU)."""
    if partitioner is None:
        return
    from offload.delegates import registry

    for backend in partitioner.backends:
        available = registry.availability(backend.name)
        if not available:
            print(
                f"{backend.name} cannot run on this machine: {available.reason}\n"
                f"  (its partitions below run on the CPU; `offload backends` lists the devices)"
            )


def _op_counts(plan) -> collections.Counter:
    from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments

    counts: collections.Counter = collections.Counter()
    operators = plan.operators or []
    for chain in plan.chains or []:
        for ins in chain.instructions or []:
            if ins.instrArgsType == InstructionArguments.KernelCall:
                counts[operators[ins.instrArgs.opIndex].name] += 1
            elif ins.instrArgsType == InstructionArguments.DelegateCall:
                counts["<delegate call>"] += 1
    return counts


def _inspect(args, progress: Progress) -> int:
    partitioner = _partitioner(args)
    _unavailable(partitioner)

    def report(program) -> None:
        if partitioner is not None:
            from offload.api import as_float_for
            from offload.partitioner import format_report

            floated = as_float_for(program, partitioner)
            if floated is not program:
                names = ", ".join(b.name for b in partitioner.backends if b.quantized_as_float)
                print(
                    f"quantized model: runs as float on {names} (weights dequantized once, float "
                    "activations, int8 inputs and outputs (de)quantized at the edges); the CPU "
                    "runs its integer ops"
                )
            print(format_report(partitioner.partition(floated)))
            print()

    def optimized(program):
        program, records = _optimized(program, "default", progress)
        print("\n".join(_pass_report(records)))
        print()
        return program

    # Where each delegate runs, and why, is printed below; no need to warn about it as well.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        module, program = _module(
            args.model,
            progress,
            partitioner=partitioner,
            on_import=report,
            prepare=optimized if args.passes else None,
        )
    print(f"file: {args.model}" + ("" if program is None else "  (compiled in memory)"))
    segments = module.pte.segments
    const = module.pte.program.constantSegment
    const_bytes = len(segments[const.segmentIndex]) if const is not None and segments else 0
    print(f"constant bytes: {const_bytes}  segments: {len(segments)}")
    for name in module.method_names:
        method = module.method(name)
        print(f"method {name}:")
        for port in method.inputs:
            print(f"  input  {port.name}: {port.type}")
        for port in method.outputs:
            print(f"  output {port.name}: {port.type}")
        for port in method.states:
            print(f"  state  {port.name}: {port.type}  (kept between runs)")
        arena, planned = method.arena_bytes, method.planned_bytes
        share = (
            f" ({arena / planned:.0%} of the {planned} bytes its tensors take unshared)" if planned else ""
        )
        print(f"  arena bytes: {arena}{share}")
        delegates = method.delegates
        print(f"  delegates: {len(delegates)}")
        if method.kept_on_device:
            print(f"  delegate outputs kept on the device for the next delegate: {method.kept_on_device}")
        for d, detail in zip(delegates, method.delegate_details):
            print(f"    {d.backend}: {d.runs_on}" + (f" ({d.reason})" if d.reason else ""))
            for line in detail.splitlines() if detail else ():
                print(f"      {line}")
        counts = _op_counts(method.plan)
        print(f"  kernel calls: {sum(counts.values())}")
        for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"    {n:6d}  {op}")
    if args.ir:
        if program is None:
            raise OffloadError("--ir needs a model file; a .pte file holds no IR")
        print(offload.ir.dump(program))
    module.close()
    return 0


def _table(rows: list[tuple[str, ...]], indent: str = "    ") -> list[str]:
    """Rows as left-aligned columns (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _capability_rows(capabilities) -> list[tuple[str, ...]]:
    rows = [("op type", "dtypes", "max rank", "attribute limits")]
    for op_type, cap in sorted(capabilities.items()):
        dtypes = ",".join(sorted(d.short for d in cap.dtypes))
        limits = "; ".join(f"{k} in {list(v)}" for k, v in cap.attributes.items()) or "-"
        rows.append((op_type, dtypes, "-" if cap.max_rank is None else str(cap.max_rank), limits))
    return rows


def _backend_lines(backend) -> list[str]:
    """What `offload backends` prints for one loadable backend; a half that fails to load is
    reported in its place (a plugin's runtime may lack its driver, its compiler a library)."""
    lines = []
    if backend.description:
        lines.append(f"  {backend.description}")
    try:
        rt = backend.runtime()
        available = rt.is_available()
        lines.append("  available here: " + ("yes" if available else f"no ({available.reason})"))
        devices = rt.devices()
        lines.append("  devices:" + ("".join(f"\n    {d}" for d in devices) if devices else " none"))
    except Exception as e:  # third-party code: report it, keep listing
        lines.append(f"  runtime failed to load: {type(e).__name__}: {e}")
    try:
        comp = backend.compiler()
    except Exception as e:
        return [*lines, f"  compiler failed to load: {type(e).__name__}: {e}"]
    for key, meaning in sorted(comp.spec_keys.items()):
        lines.append(f"  compile spec {key}: {meaning}")
    if comp.capabilities:
        lines.append(f"  supported ops ({len(comp.capabilities)}):")
        lines.extend(_table(_capability_rows(comp.capabilities)))
    else:
        lines.append("  supported ops: none declared (decided op by op)")
    return lines


def _backends(args, progress: Progress) -> int:
    from offload.delegates import registry

    entries = registry.backends()
    loaded = [e for e in entries if e.backend is not None]
    broken = [e for e in entries if e.backend is None]
    if not entries:
        print(f"no backends installed (plugins register in entry-point group '{registry.GROUP}')")
    for e in loaded:
        print(f"{e.name}  ({e.source})")
        print("\n".join(_backend_lines(e.backend)))
    if broken:
        print("broken plugins:")
        for e in broken:
            print(f"  {e.name}  ({e.source}): {e.error}")
    return 0


def _warn(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings on the command line are one line each, like errors (no source line)."""
    print(f"offload: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    progress = Progress(sys.stderr)
    commands = {
        "compile": _compile,
        "run": _run,
        "inspect": _inspect,
        "report": _report,
        "backends": _backends,
    }
    with warnings.catch_warnings():
        warnings.showwarning = _warn
        try:
            return commands[args.command](args, progress)
        except OffloadError as e:
            print(f"offload: error: {' '.join(str(e).split())}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
