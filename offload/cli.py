"""The `offload` command line: compile a model to .pte, run it, inspect it."""

from __future__ import annotations

import argparse
import collections
import os
import sys
import warnings

import numpy as np

import offload
from offload.cli_model import compile_specs, delegated, open_model, output_path, partitioner
from offload.cli_run import random_input, read_sample, run
from offload.errors import OffloadError
from offload.files import replace_file
from offload.progress import Progress
from offload.session import is_pte

_EPILOG = """\
examples:
  offload compile model.onnx -o model.pte
  offload compile model.onnx -o model.pte --passes cleanup::const_elimination,cleanup::dead_code_elimination
  offload inspect model.onnx --passes
  offload run model.pte --input image=image.npy --output out.npz
  offload run model.onnx --backend opencl --random-inputs
  offload inspect model.pte
  offload backends
"""


# What `offload compile` runs when neither --passes nor --no-passes is given: the default
# pipeline (offload.passes.DEFAULT), which keeps every ONNX conformance case passing.
DEFAULT_PASSES = "default"


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line too, like every other error (argparse prints the usage first)."""

    def error(self, message: str):
        self.exit(2, f"offload: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
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
    _spec_argument(comp)
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
        "run",
        help="run a .pte file (or a model, compiled in memory as `compile` would) and summarize its outputs",
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
        "--random-inputs",
        action="store_true",
        help="random data of the declared shapes (symbolic dims as 1) for the inputs not given; "
        "without it a missing input is an error, except that a model of fixed input shapes run with "
        "no --input at all gets random data (the output says so either way)",
    )
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument(
        "--strict",
        action="store_true",
        help="fail when a backend cannot run here (instead of leaving a --backend out, or running a "
        ".pte delegate's CPU fallback, with a warning)",
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
    _partition_arguments(run)
    _spec_argument(run)

    rep = sub.add_parser(
        "report", help="the delegation report of a model: where each op runs and why, as HTML with a picture"
    )
    rep.add_argument("model", help="model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)")
    rep.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="where to write the report")
    rep.add_argument("--json", action="store_true", help="write the report's data as JSON instead of HTML")
    rep.add_argument("--no-measure", action="store_true", help="do not run the model to measure it")
    _spec_argument(rep)
    _partition_arguments(rep)

    ins = sub.add_parser("inspect", help="print methods, inputs/outputs, op counts, constant and arena bytes")
    ins.add_argument(
        "model", help=".pte file or model file (.onnx, .tflite, nnpackage, .mlpackage, .mlmodel)"
    )
    ins.add_argument("--ir", action="store_true", help="also print a model's IR as text (model files only)")
    shown = ins.add_mutually_exclusive_group()
    shown.add_argument(
        "--passes",
        action="store_true",
        help="print op counts before / after the default pass pipeline and what each pass changed "
        "(model files only)",
    )
    shown.add_argument(
        "--no-passes",
        action="store_true",
        help="show the graph as written: no graph passes (by default they run first, as in compile)",
    )
    _partition_arguments(ins)

    sub.add_parser(
        "backends", help="list the backends installed here: availability, devices, the ops each takes"
    )
    return p


def _spec_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spec",
        action="append",
        default=[],
        metavar="NAME.key=value",
        help="a compile spec for backend NAME (repeatable)",
    )


def _partition_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that choose what runs on backend delegates (compile, run and inspect of a model)."""
    p.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="delegate the ops this backend takes (repeatable, in priority order; model files only)",
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
        sample = read_sample(os.path.join(folder, f), names)
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


def _print_fp16_errors(reference, fp16, seed: int) -> None:
    """add_fp16_cast's error per output against the float32 program, on seeded random inputs
    (symbolic dims as 1)."""
    from offload.passes.quantization.add_fp16_cast import output_errors

    rng = np.random.default_rng(seed)
    feeds = {}
    for v in reference.main.inputs:
        port = offload.runtime.module.Port(v.name, v.type)
        feeds[v.name] = random_input(port, rng)
    for name, e in output_errors(reference, fp16, feeds).items():
        print(
            f"float16 error of '{name}' against float32: max abs {e['max_abs']:.3g}, max rel {e['max_rel']:.3g}"
        )


def _compile(args, progress: Progress) -> int:
    output_path(args.output, "-o")
    chosen = partitioner(args)
    _unavailable(chosen)
    specs = compile_specs(args.spec)
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
    if (args.calibrate or args.input_range) and chosen is None:
        raise OffloadError("--calibrate and --input-range need --backend NAME")
    if args.input_range:
        program = offload.calibrate(program, input_ranges=_input_ranges(args.input_range, program))
    samples = _calibration(args.calibrate, program) if args.calibrate else None
    if chosen is not None:
        with progress.step("delegating to " + ", ".join(args.backend)):
            program = delegated(program, chosen, specs, samples)
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


def _report(args, progress: Progress) -> int:
    from offload import report

    output_path(args.output, "-o")
    chosen = partitioner(args)
    if chosen is None:
        raise OffloadError("offload report needs --backend NAME: the backend whose partitions it shows")
    with progress.step(f"importing {args.model}"):
        program = offload.load(args.model)
    with progress.step("partitioning" + ("" if args.no_measure else " and measuring")):
        data = report.build(program, chosen, compile_specs(args.spec), measure=not args.no_measure)
    text = report.to_json(data) if args.json else report.render_html(data)
    replace_file(args.output, text.encode())
    s = data["summary"]
    print(f"delegated {s['delegated_ops']}/{s['ops']} ops in {s['partitions']} partition(s)")
    for r in data["reasons"]:
        print(f"  {r['count']:>4} on the cpu: {r['reason']}")
    print(f"wrote {args.output}")
    return 0


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
    chosen = partitioner(args)
    if args.passes and is_pte(args.model):
        raise OffloadError(f"{args.model}: --passes needs a model file; a .pte file is already compiled")
    _unavailable(chosen)

    def report(program) -> None:
        if chosen is not None:
            from offload.api import as_float_for
            from offload.partitioner import format_report

            floated = as_float_for(program, chosen)
            if floated is not program:
                names = ", ".join(b.name for b in chosen.backends if b.quantized_as_float)
                print(
                    f"quantized model: runs as float on {names} (weights dequantized once, float "
                    "activations, int8 inputs and outputs (de)quantized at the edges); the CPU "
                    "runs its integer ops"
                )
            print(format_report(chosen.partition(floated)))
            print()

    def optimized(program):
        """The default passes first, as ``compile`` runs them: the placement shown is compile's."""
        program, records = _optimized(program, "default", progress)
        if args.passes:
            print("\n".join(_pass_report(records)))
        elif records:
            before, after = sum(records[0].before.values()), sum(records[-1].after.values())
            print(
                f"graph passes: {before} -> {after} ops (the default pipeline, as compile runs it; --no-passes: the graph as written)"
            )
        print()
        return program

    # Where each delegate runs, and why, is printed below; no need to warn about it as well.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        module, program = open_model(
            args.model,
            progress,
            partitioner=chosen,
            on_import=report,
            prepare=None if args.no_passes else optimized,
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
        "run": run,
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
        except OSError as e:  # a path the checks above did not foresee (a full disk, permissions)
            where = f"{e.filename}: " if e.filename else ""
            print(f"offload: error: {where}{e.strerror or e}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
