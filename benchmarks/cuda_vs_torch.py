"""Times offload's `cuda` backend against PyTorch on the same models: torch eager and torch eager
replayed as one CUDA graph, fp32 and fp16, at batch 1 and batch 32; for a machine with an NVIDIA
GPU and torch + torchvision (``.ci/gpu-check`` runs it last).

Usage: python benchmarks/cuda_vs_torch.py [--models a,b] [--budget-s S] [--device cuda|cpu] ...

Models (built here with torch's random initialization under a fixed seed, ``torch.manual_seed(0)``:
such a machine has no network, so no pretrained weights; the timings do not depend on the
values; BatchNorm statistics are taken from one random batch, ``calibrate_batchnorm``): torchvision's ResNet-50, MobileNetV2, MobileNetV3-Small, EfficientNet-B0 and ViT-B/16 on
3x224x224 images, and a 6-layer ``nn.TransformerEncoder`` (d_model 512, 8 heads, feed-forward
2048, batch_first) on sequences of 128. Each is exported per batch size with
``torch.onnx.export`` (static shapes; ``--exporter``: TorchScript's exporter at opset 17 where
the torch at hand has it, else the dynamo exporter at opset 18), read by ``offload.load``,
lowered with ``offload.to_backend(program, "cuda")`` (compile specs as default: CUDA graphs on)
and, for fp16, ``compile_specs={"cuda": {"precision": "fp16"}}`` (half storage, float32 in and
out), saved and loaded as a ``.pte``.

Timing: each measurement is a warm-up (``--warmup`` calls), then ``--runs`` timed calls, each
followed by a device synchronize (``torch.cuda.synchronize``, which waits for every stream, the
one offload's delegate runs on too) and timed with ``time.perf_counter``; the median is reported
(fewer warm-up calls, and no fewer than 3 timed ones, when one measurement passes
``--max-timing-s``). Inputs are torch CUDA tensors:
offload reads them in place through DLPack and returns its outputs on the device
(``output_device="device"``), so neither side pays host copies. torch runs under
``torch.no_grad()`` with ``torch.backends.cudnn.benchmark = True``; TF32 is off on both sides
(offload's fp32 is float32 arithmetic; ``--tf32`` lets torch's convolutions and matmuls use it).
torch graphs: the eager model captured once in a ``torch.cuda.CUDAGraph`` (after warm-up calls on
a side stream), timed by ``replay()``. fp16 rows compare offload's half storage with
``model.half()`` fed half inputs.

Per row: model, batch, precision, offload ms, torch eager ms, torch graphs ms, offload / eager,
offload / graphs, the largest absolute difference of offload's outputs from torch eager's and
the largest absolute value of torch's (its scale), and ``ok`` or ``DIFFERS``: whether that
difference is within ``AGREE`` (1e-3 in fp32, 1e-1 in fp16) times the scale (a row that
differs stays in the means; the rows that differ are listed at the end). A model that fails to build, export, load,
lower or run prints its error in its row and is left out of the means (the failed rows are
counted). Rows that the time budget (``--budget-s``, counted from the start) leaves no time for
are printed as skipped and counted the same way. On SIGTERM (``timeout`` in gpu-check) the script
stops measuring and prints its means of the rows done so far.

The last line, the geometric means over the models of the fp32 ratios, is exactly
``gpu: offload/torch-eager B1 <x> | offload/torch-graphs G1 <y> | offload/torch-eager B32 <z>``
with x: offload ms / torch eager ms at batch 1, y: offload ms / torch graphs ms at batch 1, z:
offload ms / torch eager ms at batch 32 (time per batch of 32: the inverse throughput ratio).
Each number is written with two decimals (``0.87``; below 1 offload is faster) or ``n/a`` where
no model gave that ratio. The line before it gives the same means for fp16.

``--device cpu`` runs the same flow without a GPU (a dry run of the script): offload's CPU
executor (``--offload-backend cpu``) or its ``opencl`` backend (PoCL on a CPU) against torch on
the CPU, no CUDA graphs (the graphs column and G1 mean are ``n/a``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import os
import signal
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np

MODELS = (
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "vit_b_16",
    "transformer_encoder",
)
PRECISIONS = ("fp32", "fp16")
# a row whose largest difference from torch passes this share of torch's largest output is marked:
# float32 sums in another order stay far below 1e-3 of the scale (2.7e-5 at most in the CPU dry
# run); half storage rounds every stored value to 11 bits, differently on each side, through dozens
# of layers (ResNet-50: 3.3e-2 of the scale in the CPU dry run), while a wrong result is off by
# the order of the scale itself
AGREE = {"fp32": 1e-3, "fp16": 1e-1}
LABELS = ("offload/torch-eager B1", "offload/torch-graphs G1", "offload/torch-eager B{large}")


@dataclasses.dataclass
class Row:
    """One model at one batch size and precision: times in ms, or the error that stopped it."""

    model: str
    batch: int
    precision: str
    offload_ms: float | None = None
    eager_ms: float | None = None
    graphs_ms: float | None = None
    max_diff: float | None = None
    ref_max: float | None = None
    error: str | None = None

    def agrees(self) -> bool:
        """Whether offload's outputs are within ``AGREE`` (of the precision) times torch's largest
        output of torch eager's."""
        if self.max_diff is None or self.ref_max is None:
            return False
        return self.max_diff <= AGREE[self.precision] * self.ref_max

    def ratio(self, other: float | None) -> float | None:
        if self.error or self.offload_ms is None or not other:
            return None
        return self.offload_ms / other


def geometric_mean(values) -> float | None:
    """The geometric mean of the positive finite values among ``values`` (None where none is)."""
    kept = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return statistics.geometric_mean(kept) if kept else None


def format_ratio(value: float | None) -> str:
    """A ratio with two decimals, or ``n/a`` for none."""
    return "n/a" if value is None else f"{value:.2f}"


def means(rows: list[Row], precision: str, large: int) -> tuple[float | None, float | None, float | None]:
    """Geometric means over models of offload / eager at batch 1, offload / graphs at batch 1 and
    offload / eager at batch ``large``, of the rows of ``precision`` that ran."""
    picked = [r for r in rows if r.precision == precision]
    return (
        geometric_mean(r.ratio(r.eager_ms) for r in picked if r.batch == 1),
        geometric_mean(r.ratio(r.graphs_ms) for r in picked if r.batch == 1),
        geometric_mean(r.ratio(r.eager_ms) for r in picked if r.batch == large),
    )


def summary_line(
    values: tuple[float | None, float | None, float | None], large: int = 32, prefix: str = "gpu"
) -> str:
    """``gpu: offload/torch-eager B1 x | offload/torch-graphs G1 y | offload/torch-eager B32 z``."""
    parts = [f"{label.format(large=large)} {format_ratio(v)}" for label, v in zip(LABELS, values)]
    return f"{prefix}: " + " | ".join(parts)


def _num(value: float | None, fmt: str) -> str:
    width = int(fmt.split(".")[0] or 0)
    return f"{'n/a':>{width}s}" if value is None else format(value, fmt)


HEADER = (
    f"{'model':20s} {'batch':>5s} {'prec':>4s} {'offload ms':>10s} {'eager ms':>9s} {'graphs ms':>9s} "
    f"{'off/eager':>9s} {'off/graphs':>10s} {'max|diff|':>9s} {'max|torch|':>10s} {'outputs':>7s}"
)


def format_row(row: Row) -> str:
    """One table line; a failed or skipped row shows its error after the model, batch and precision."""
    head = f"{row.model:20s} {row.batch:5d} {row.precision:>4s}"
    if row.error:
        return f"{head} {row.error}"
    return (
        f"{head} {_num(row.offload_ms, '10.2f')} {_num(row.eager_ms, '9.2f')} {_num(row.graphs_ms, '9.2f')} "
        f"{format_ratio(row.ratio(row.eager_ms)):>9s} {format_ratio(row.ratio(row.graphs_ms)):>10s} "
        f"{_num(row.max_diff, '9.1e')} {_num(row.ref_max, '10.2e')} {'ok' if row.agrees() else 'DIFFERS':>7s}"
    )


def one_line_error(exc: BaseException) -> str:
    """``Type: message`` on one line, cut to 300 characters."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return f"error: {text[:300]}"


# torch from here on: imported inside the functions, so that the pieces above import without it


def build_model(name: str):
    """(eval-mode fp32 model on the CPU, function batch -> example input), seeded."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False)
        shape = (128, 512)
    elif name in MODELS:
        model = getattr(torchvision.models, name)(weights=None)
        shape = (3, 224, 224)
    else:
        raise ValueError(f"unknown model {name!r}: one of {', '.join(MODELS)}")

    for module in model.modules():
        # ViT-B/16's head starts at zero (its outputs would all be 0, and so the difference)
        if isinstance(module, torch.nn.Linear) and not module.weight.any():
            torch.nn.init.normal_(module.weight, std=0.02)

    def example(batch: int):
        generator = torch.Generator().manual_seed(batch)
        return torch.randn((batch, *shape), generator=generator)

    calibrate_batchnorm(model, example(4))
    return model.eval(), example


def calibrate_batchnorm(model, x) -> None:
    """Sets every BatchNorm's running mean and variance to those of its input on ``x``. Freshly
    initialized (mean 0, variance 1) in eval mode, the convnets shrink their activations layer by
    layer: MobileNetV2's outputs come out near 1e-9, EfficientNet-B0's near 1e-14, where half
    underflows to 0 and no difference means anything. Normalized by their own statistics, the
    outputs are of order 1."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    kept = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 1.0  # the running statistics become this batch's
    model.train()
    with torch.no_grad():
        model(x)
    for m, momentum in zip(norms, kept):
        m.momentum = momentum
    model.eval()


def export_onnx(model, example, path: str, exporter: str) -> str:
    """Writes ``model`` traced on ``example`` to ``path``; returns the exporter that wrote it.
    Run with gradients on: nn.TransformerEncoder's inference fast path (a fused op no exporter
    writes) is then not taken."""
    import torch

    kinds = ["torchscript", "dynamo"] if exporter == "auto" else [exporter]
    last: Exception | None = None
    for kind in kinds:
        try:
            if kind == "torchscript":
                torch.onnx.export(
                    model, (example,), path, opset_version=17, dynamo=False,
                    input_names=["input"], output_names=["output"],
                )  # fmt: skip
            else:
                torch.onnx.export(
                    model, (example,), path, opset_version=18, dynamo=True, external_data=False,
                    input_names=["input"], output_names=["output"],
                )  # fmt: skip
            return kind
        except Exception as exc:  # the next exporter may manage
            last = exc
    assert last is not None
    raise last


class Timer:
    """Median ms of a call followed by a device synchronize."""

    def __init__(self, sync, warmup: int, runs: int, max_s: float):
        self.sync, self.warmup, self.runs, self.max_s = sync, warmup, runs, max_s

    def __call__(self, fn) -> float:
        # warm-up calls stop early once they have taken max_s (a slow model gets one)
        begin = time.perf_counter()
        for _ in range(self.warmup):
            fn()
            self.sync()
            if time.perf_counter() - begin > self.max_s:
                break
        times: list[float] = []
        spent = 0.0
        while len(times) < self.runs and (len(times) < 3 or spent < self.max_s):
            start = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - start)
            spent += times[-1]
        return statistics.median(times) * 1e3


def _to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().float().cpu().numpy()
    if hasattr(value, "get"):  # CuPy / pyopencl array
        value = value.get()
    return np.asarray(value, dtype=np.float32)


def _flat(outputs) -> list:
    if isinstance(outputs, dict):
        return list(outputs.values())
    if isinstance(outputs, (list, tuple)):
        return [t for o in outputs for t in _flat(o)]
    return [outputs]


def max_abs_diff(got, want) -> tuple[float, float]:
    """(largest |got - want| over all outputs, largest |want|), in float64."""
    got, want = [_to_numpy(g) for g in _flat(got)], [_to_numpy(w) for w in _flat(want)]
    if len(got) != len(want):
        raise ValueError(f"offload gave {len(got)} outputs, torch {len(want)}")
    diff = scale = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            raise ValueError(f"output shape {g.shape} from offload, {w.shape} from torch")
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        diff = max(diff, float(d.max()) if np.all(np.isfinite(d)) else math.inf)
        scale = max(scale, float(np.abs(w).max()))
    return diff, scale


def offload_method(path: str, backend: str, precision: str, extra: dict | None = None):
    """The ``forward`` method of the .pte of the ONNX file at ``path``, lowered to ``backend``
    (``cpu``: none, offload's CPU executor) with the compile specs ``extra`` besides precision."""
    import offload

    program = offload.load(path)
    if backend != "cpu":
        specs = dict(extra or {}, **({"precision": "fp16"} if precision == "fp16" else {}))
        program = offload.to_backend(program, backend, compile_specs={backend: specs} if specs else None)
    elif precision == "fp16":
        raise ValueError("offload's CPU executor has no fp16 storage: use --offload-backend opencl")
    return offload.runtime.load(offload.save(program)).method("forward")


def torch_graph(model, x, warmup: int):
    """A replay function for ``model(x)`` captured in a CUDA graph, and its output."""
    import torch

    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(max(3, warmup)):
            model(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay, static_y


def measure(row: Row, model, x, path: str, args, timer: Timer) -> None:
    """Fills ``row``'s times and difference: offload on the .pte of ``path``, torch eager and (on a
    GPU) torch graphs on ``model`` (already in the row's precision, on the device) and ``x``."""
    import torch

    method = offload_method(
        path, args.offload_backend, row.precision, dict(getattr(args, "spec", None) or [])
    )
    tx = x.half() if row.precision == "fp16" else x
    out_where = "device" if args.device == "cuda" else "host"
    with torch.no_grad():
        want = model(tx)
        got = method.run({"input": x}, output_device=out_where)
        row.max_diff, row.ref_max = max_abs_diff(got, want)
        row.offload_ms = timer(lambda: method.run({"input": x}, output_device=out_where))
        row.eager_ms = timer(lambda: model(tx))
        if args.device == "cuda":
            replay, _ = torch_graph(model, tx, args.warmup)
            row.graphs_ms = timer(replay)


class Models:
    """The models built so far: the fp32 one on the CPU (exported) and its copy per precision on
    the device (timed), or the error that stopped the build."""

    def __init__(self, device: str):
        self.device = device
        self.built: dict[str, tuple] = {}
        self.on_device: dict[tuple[str, str], object] = {}

    def cpu(self, name: str):
        """(model, example) or raises the build's error (again, for each batch)."""
        if name not in self.built:
            try:
                self.built[name] = build_model(name)
            except Exception as exc:
                self.built[name] = exc
        found = self.built[name]
        if isinstance(found, Exception):
            raise found
        return found

    def device_model(self, name: str, precision: str):
        if (name, precision) not in self.on_device:
            copied = copy.deepcopy(self.cpu(name)[0]).to(self.device)
            self.on_device[name, precision] = copied.half() if precision == "fp16" else copied
        return self.on_device[name, precision]


def run_batch(
    name: str, batch: int, models: Models, args, timer: Timer, deadline: float, folder: str
) -> list[Row]:
    """The rows of one model at one batch size, one per precision, each printed when done."""
    import torch

    rows = [Row(name, batch, p) for p in args.precisions]
    pending = list(rows)
    if time.monotonic() > deadline:
        for r in rows:
            r.error = "skipped: time budget spent"
        pending = []
    else:
        path = os.path.join(folder, f"{name}_b{batch}.onnx")
        try:
            model, example = models.cpu(name)
            x_cpu = example(batch)
            exporter = export_onnx(model, x_cpu, path, args.exporter)
        except Exception as exc:
            for r in rows:
                r.error = one_line_error(exc)
            pending = []
        if args.verbose and pending:
            print(f"  ({name} batch {batch}: exported by {exporter})", file=sys.stderr)
    for r in pending:
        if time.monotonic() > deadline:
            r.error = "skipped: time budget spent"
            continue
        try:
            measure(r, models.device_model(name, r.precision), x_cpu.to(args.device), path, args, timer)
        except Exception as exc:
            r.error = one_line_error(exc)
            if args.verbose:
                traceback.print_exc()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    for r in rows:
        print(format_row(r), flush=True)
    if pending:
        os.remove(path)
    return rows


class Stopped(BaseException):
    """SIGTERM arrived: stop measuring, print what was measured. Not an ``Exception``, so that
    neither offload's kernel errors nor a row's error handling take it for a failure."""


def _stop(signum, frame):
    raise Stopped


def _setup_torch(args) -> None:
    import torch

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA device: use --device cpu for a dry run")
    if args.device == "cpu":
        torch.set_num_threads(args.threads or torch.get_num_threads())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--offload-backend", choices=("cuda", "opencl", "cpu"), help="default: cuda on cuda, cpu on cpu"
    )
    parser.add_argument("--precisions", default="fp32,fp16", help="comma-separated, of fp32, fp16")
    parser.add_argument("--large-batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--max-timing-s", type=float, default=6.0, help="stop one measurement's timed calls after this"
    )
    parser.add_argument("--budget-s", type=float, default=360.0, help="rows not started by then are skipped")
    parser.add_argument("--exporter", choices=("auto", "torchscript", "dynamo"), default="auto")
    parser.add_argument(
        "--tf32", action="store_true", help="let torch use TF32 in fp32 convolutions and matmuls"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch CPU threads with --device cpu (0: torch's default)"
    )
    parser.add_argument(
        "--spec",
        action="append",
        type=lambda kv: tuple(kv.split("=", 1)) if "=" in kv else parser.error(f"--spec {kv}: KEY=VALUE"),
        help="an offload compile spec KEY=VALUE for the backend (repeatable), e.g. implicit_conv=0",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    start = time.monotonic()
    args.offload_backend = args.offload_backend or ("cuda" if args.device == "cuda" else "cpu")
    args.precisions = [p for p in args.precisions.split(",") if p]
    names = [m for m in args.models.split(",") if m]
    for value, allowed, what in ((args.precisions, PRECISIONS, "precision"), (names, MODELS, "model")):
        bad = [v for v in value if v not in allowed]
        if bad:
            parser.error(f"unknown {what} {', '.join(bad)}: one of {', '.join(allowed)}")
    _setup_torch(args)
    import torch

    if args.device == "cuda":
        sync = torch.cuda.synchronize
        print(
            f"torch {torch.__version__} on {torch.cuda.get_device_name()}, offload backend {args.offload_backend}"
        )
    else:

        def sync():
            return None

        print(
            f"torch {torch.__version__} on the CPU ({torch.get_num_threads()} threads), offload backend {args.offload_backend}"
        )
    timer = Timer(sync, args.warmup, args.runs, args.max_timing_s)
    print(HEADER, flush=True)
    rows: list[Row] = []
    models = Models(args.device)
    # every model at batch 1 first: a budget spent early leaves the large batch short, not a model
    signal.signal(signal.SIGTERM, _stop)
    with tempfile.TemporaryDirectory(prefix="offload-vs-torch-") as folder:
        try:
            for batch in (1, args.large_batch):
                for name in names:
                    rows += run_batch(name, batch, models, args, timer, start + args.budget_s, folder)
        except Stopped:
            # the means of the rows done so far still end the output
            print(
                "stopped by SIGTERM (a time limit such as gpu-check's GPU_TORCH_S): the rows not shown did not run"
            )
    failed = [r for r in rows if r.error]
    print(
        f"{len(rows) - len(failed)} rows ran, {len(failed)} failed or skipped (left out of the means); "
        f"{time.monotonic() - start:.0f} s"
    )
    differ = [f"{r.model} B{r.batch} {r.precision}" for r in rows if not r.error and not r.agrees()]
    if differ:
        print(
            f"outputs differ from torch's beyond {AGREE} of their scale (kept in the means): {', '.join(differ)}"
        )
    if "fp16" in args.precisions:
        print(summary_line(means(rows, "fp16", args.large_batch), args.large_batch, prefix="fp16"))
    print(summary_line(means(rows, "fp32", args.large_batch), args.large_batch), flush=True)


if __name__ == "__main__":
    main()
