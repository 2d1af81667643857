"""The `offload` command line: compile a model to .pte, run it, inspect it."""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import numpy as np

import offload
from offload.errors import OffloadError
from offload.frontends import sniff
from offload.ir import DataType, TensorType
from offload.progress import Progress

_EPILOG = """\
examples:
  offload compile model.onnx -o model.pte
  offload run model.pte --input image=image.npy --output out.npz
  offload inspect model.pte
"""


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
    comp.add_argument("model", help="model file (.onnx)")
    comp.add_argument("-o", "--output", required=True, metavar="OUT.pte", help="where to write the .pte file")

    run = sub.add_parser(
        "run", help="run a .pte file (or a model, compiled in memory) and summarize its outputs"
    )
    run.add_argument("model", help=".pte file or model file (.onnx)")
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

    ins = sub.add_parser("inspect", help="print methods, inputs/outputs, op counts, constant and arena bytes")
    ins.add_argument("model", help=".pte file or model file (.onnx)")
    ins.add_argument("--ir", action="store_true", help="also print a model's IR as text (model files only)")
    return p


def _is_pte(path: str) -> bool:
    if not os.path.isfile(path):
        raise OffloadError(f"{path}: no such file")
    with open(path, "rb") as f:
        return sniff(f.read(8)) == "pte"


def _module(path: str, progress: Progress):
    """The runtime Module of a .pte file, or of a model compiled in memory."""
    if _is_pte(path):
        with progress.step(f"loading {path}"):
            return offload.runtime.load(path), None
    with progress.step(f"importing {path}"):
        program = offload.load(path)
    with progress.step("lowering to .pte"):
        data = offload.save(program)
    with progress.step("loading"):
        return offload.runtime.load(data), program


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


def _compile(args, progress: Progress) -> int:
    with progress.step(f"importing {args.model}"):
        program = offload.load(args.model)
    with progress.step(f"writing {args.output}"):
        offload.save(program, args.output)
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes)")
    return 0


def _run(args, progress: Progress) -> int:
    module, _ = _module(args.model, progress)
    method = module.method(args.method) if args.method else module.method(module.method_names[0])
    feeds = _inputs(method, args.input, args.seed)
    start = time.perf_counter()
    outputs = method.run(feeds)
    elapsed = time.perf_counter() - start
    for name, value in outputs.items():
        print(_summary(name, value))
    print(f"ran '{method.name}' on cpu in {elapsed * 1e3:.1f} ms")
    if args.output:
        np.savez(args.output, **{k: np.asarray(v) for k, v in outputs.items() if not isinstance(v, list)})
        print(f"wrote {args.output}")
    return 0


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
    module, program = _module(args.model, progress)
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
        arena, planned = method.arena_bytes, method.planned_bytes
        share = (
            f" ({arena / planned:.0%} of the {planned} bytes its tensors take unshared)" if planned else ""
        )
        print(f"  arena bytes: {arena}{share}")
        delegates = method.plan.delegates or []
        print(f"  delegates: {len(delegates)}" + "".join(f"\n    {d.id}" for d in delegates))
        counts = _op_counts(method.plan)
        print(f"  kernel calls: {sum(counts.values())}")
        for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"    {n:6d}  {op}")
    if args.ir:
        if program is None:
            raise OffloadError("--ir needs a model file; a .pte file holds no IR")
        print(offload.ir.dump(program))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    progress = Progress(sys.stderr)
    try:
        return {"compile": _compile, "run": _run, "inspect": _inspect}[args.command](args, progress)
    except OffloadError as e:
        print(f"offload: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
