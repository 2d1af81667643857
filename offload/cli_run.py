"""``offload run``: a .pte file, or a model compiled in memory, run on given (or asked-for random)
inputs, its outputs summarized, the set-up of the first run timed apart from the steady run."""

from __future__ import annotations

import collections
import contextlib
import os
import time

import numpy as np

import offload
from offload.cli_model import compile_specs, input_folder, open_model, output_path, partitioner
from offload.errors import OffloadError
from offload.ir import DataType, TensorType
from offload.profile import Profile, profiling
from offload.progress import Progress


def random_input(port, rng: np.random.Generator) -> np.ndarray:
    """Random data of the port's declared type, its symbolic dims as 1."""
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


def _static(port) -> bool:
    return isinstance(port.type, TensorType) and port.type.is_static


def run_inputs(method, given: list[str], seed: int, random_inputs: bool) -> tuple[dict, str | None]:
    """The feeds: each ``--input NAME=FILE.npy``, and random data for the rest where asked for
    (``--random-inputs``) or where no input was given at all and every input's shape is fixed;
    the line that says what was made up (None when nothing was)."""
    feeds = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep:
            raise OffloadError(f"--input expects NAME=FILE.npy, got '{item}'")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise OffloadError(f"--input {name}: cannot read '{path}': {e}") from None
    missing = [p for p in method.inputs if p.name not in feeds]
    if not missing:
        return feeds, None
    if not random_inputs and (given or not all(_static(p) for p in missing)):
        names = ", ".join(f"'{p.name}' {p.type}" for p in missing)
        raise OffloadError(
            f"no value for input(s) {names}: pass --input NAME=FILE.npy for each, or --random-inputs "
            "for random data (symbolic dims as 1)"
        )
    rng = np.random.default_rng(seed)
    made = {p.name: random_input(p, rng) for p in missing}
    feeds.update(made)
    why = "--random-inputs" if random_inputs else "no --input given"
    shapes = ", ".join(f"{n} {a.dtype}{list(a.shape)}" for n, a in made.items())
    symbolic = "; symbolic dims as 1" if not all(_static(p) for p in missing) else ""
    return feeds, f"random inputs ({why}, seed {seed}{symbolic}): {shapes}"


def summary(name: str, value) -> str:
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


def placement(delegates) -> str:
    """Where a run went: the CPU, or which delegates ran on their backend, and which ran on the
    CPU because their backend cannot run here."""
    if not delegates:
        return " on cpu"
    on = collections.Counter(d.backend for d in delegates if d.runs_on == "backend")
    off = collections.Counter(d.backend for d in delegates if d.runs_on != "backend")
    parts = [f"on {name} x{n}" for name, n in on.items()]
    parts += [f"on the CPU: {name} (cpu fallback) x{n}, {name} cannot run here" for name, n in off.items()]
    return " with delegates " + "; ".join(parts)


def _backends(args) -> tuple[list[str], dict]:
    """The --backend names that can run here (each other one warned about, as InferenceSession
    does; an error under --strict) and the --spec flags of those."""
    from offload.session import usable_providers

    specs = compile_specs(args.spec)
    unknown = sorted(set(specs) - set(args.backend))
    if unknown:
        raise OffloadError(f"--spec names backend(s) {unknown}, which --backend does not ask for")
    usable = [n for n, _ in usable_providers([(n, {}) for n in args.backend], args.strict)]
    return usable, {k: v for k, v in specs.items() if k in usable}


def _default_passes(program):
    return offload.optimize(program, "default")


def _open(args, progress: Progress):
    """The Module to run: a .pte file, or the model compiled as ``offload compile`` would with
    the default passes and the --backend flags."""
    backends, specs = _backends(args)
    if not args.backend:
        partitioner(args)  # --deny-op and the like without --backend are a mistake
    chosen = partitioner(args, backends)
    return open_model(args.model, progress, args.strict, chosen, prepare=_default_passes, specs=specs)


def run(args, progress: Progress) -> int:
    if args.input_dir or args.output_dir or args.ray:
        return run_files(args, progress)
    if args.timeout is not None and not args.timeout > 0:
        raise OffloadError(f"--timeout takes a positive number of seconds, got {args.timeout}")
    for flag, path in (("--output", args.output), ("--profile", args.profile)):
        if path:
            output_path(path, flag)
    # A profile records the load too (kernel builds, shapes planned at init) on its own event,
    # then the second run (the first one builds and plans what it needs).
    profile = Profile() if args.profile else None
    start = time.perf_counter()
    with profiling(profile), profile.span("load", "load") if profile else contextlib.nullcontext():
        module, program = _open(args, progress)
    load_s = time.perf_counter() - start
    method = module.method(args.method) if args.method else module.method(module.method_names[0])
    feeds, made_up = run_inputs(method, args.input, args.seed, args.random_inputs)
    if made_up:
        print(made_up)
    options = offload.runtime.RunOptions(timeout=args.timeout) if args.timeout is not None else None
    start = time.perf_counter()
    method.run(feeds, options)
    first_s = time.perf_counter() - start
    module.reset_state()  # a model with state gives the second run the first run's states
    start = time.perf_counter()
    outputs = method.run(feeds, options, profile)
    elapsed = time.perf_counter() - start
    for name, value in outputs.items():
        print(summary(name, value))
    what = "import, graph passes, delegation, lowering" if program is not None else "mapping, checks"
    print(f"load: {load_s * 1e3:.1f} ms ({what}, backend set-up)")
    print(
        f"first run: {first_s * 1e3:.1f} ms (with its one-time set-up: kernel builds or cache loads, plans for these shapes)"
    )
    print(f"ran '{method.name}' in {elapsed * 1e3:.1f} ms (the second run)" + placement(method.delegates))
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
    return read_sample(path, [p.name for p in method.inputs])


def read_sample(path: str, names: list[str]) -> dict[str, np.ndarray]:
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as data:
                return {n: data[n] for n in data.files}
        if len(names) != 1:
            raise OffloadError(f"{path}: an .npy file feeds a model of one input; this one takes {names}")
        return {names[0]: np.load(path, allow_pickle=False)}
    except (OSError, ValueError) as e:
        raise OffloadError(f"{path}: not a readable .npy/.npz file: {e}") from None


def run_files(args, progress: Progress) -> int:
    """--input-dir: every file of the folder through the method (a local loop, or Ray Data)."""
    if not (args.input_dir and args.output_dir):
        raise OffloadError("--input-dir and --output-dir go together (and --ray needs both)")
    files = sorted(
        f for f in os.listdir(input_folder(args.input_dir, "--input-dir")) if f.endswith((".npz", ".npy"))
    )
    if not files:
        raise OffloadError(f"--input-dir {args.input_dir}: no .npz or .npy files")
    try:
        os.makedirs(args.output_dir, exist_ok=True)
    except OSError as e:
        raise OffloadError(f"--output-dir {args.output_dir}: cannot make the folder: {e.strerror}") from None
    module, _ = _open(args, progress)
    method = module.method(args.method) if args.method else module.method(module.method_names[0])
    samples = [_sample(os.path.join(args.input_dir, f), method) for f in files]
    start = time.perf_counter()
    if args.ray:
        results = _run_on_ray(args, method, samples)
    else:
        results = [method.run(s) for s in progress.items(samples, f"running {len(samples)} files")]
    elapsed = time.perf_counter() - start
    for name, outputs in zip(files, results):
        np.savez(os.path.join(args.output_dir, os.path.splitext(name)[0] + ".npz"), **outputs)
    where = f"on Ray ({args.ray})" if args.ray else "here"
    print(f"ran '{method.name}' on {len(files)} files {where} in {elapsed:.2f} s; wrote {args.output_dir}")
    return 0


def _run_on_ray(args, method, samples: list[dict]) -> list[dict]:
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
