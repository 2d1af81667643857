"""The `offload` command line: inspect and run models."""

from __future__ import annotations

import argparse
import collections
import sys
import time

import numpy as np

import offload
from offload.errors import OffloadError
from offload.ir import DataType, TensorType


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="offload", description="Run trained neural networks through backend delegates.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="run a model on the CPU kernels and summarize its outputs")
    run.add_argument("model", help="model file (.onnx)")
    run.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input from a .npy file (repeatable)"
    )
    run.add_argument("--output", metavar="OUT.npz", help="write all outputs to this .npz file")
    run.add_argument("--seed", type=int, default=0, help="seed for the random inputs made for inputs not given")

    ins = sub.add_parser("inspect", help="print a model's inputs, outputs, op counts and IR")
    ins.add_argument("model", help="model file (.onnx)")
    ins.add_argument("--ir", action="store_true", help="also print the whole program as text")
    return p


def _random_input(name: str, t, rng: np.random.Generator) -> np.ndarray:
    if not isinstance(t, TensorType) or t.shape is None:
        raise OffloadError(f"input '{name}' has no declared shape; pass it with --input {name}=FILE.npy")
    shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
    dt = t.dtype.numpy
    if t.dtype == DataType.BOOL:
        return rng.random(shape) < 0.5
    if np.issubdtype(dt, np.integer):
        return rng.integers(0, 10, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def _load_inputs(program, given: list[str], seed: int) -> dict[str, np.ndarray]:
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
    for v in program.main.inputs:
        if v.name not in feeds:
            feeds[v.name] = _random_input(v.name, v.type, rng)
    return feeds


def _run(args) -> int:
    program = offload.load(args.model)
    feeds = _load_inputs(program, args.input, args.seed)
    start = time.perf_counter()
    outputs = offload.evaluate(program, feeds)
    elapsed = time.perf_counter() - start
    for name, value in outputs.items():
        a = np.asarray(value)
        line = f"{name}: {a.dtype}{list(a.shape)}"
        if a.size and a.dtype.kind in "fiub":
            f = a.astype(np.float64)
            line += f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}"
            if a.ndim == 2 and a.shape[0] == 1:
                line += f"  argmax {int(f.argmax())}"
        print(line)
    print(f"ran on cpu in {elapsed * 1e3:.1f} ms")
    if args.output:
        np.savez(args.output, **{k: np.asarray(v) for k, v in outputs.items()})
        print(f"wrote {args.output}")
    return 0


def _inspect(args) -> int:
    program = offload.load(args.model)
    fn = program.main
    print(f"model: {args.model}")
    opsets = ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in fn.opset_imports.items())
    print(f"function: {fn.name}  opsets: {opsets}")
    for v in fn.inputs:
        print(f"  input  {v.name}: {v.type}")
    for v in fn.outputs:
        print(f"  output {v.name}: {v.type}")
    ops = collections.Counter(op.qualified_type for op in fn.body.walk())
    consts = sum(v.const_value.nbytes for v in fn.body.constants.values() if v.const_value.dtype != object)
    print(f"operations: {sum(ops.values())}  constants: {len(fn.body.constants)} ({consts} bytes)")
    for name, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6d}  {name}")
    if args.ir:
        print(offload.ir.dump(program))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": _run, "inspect": _inspect}[args.command](args)
    except OffloadError as e:
        print(f"offload: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
