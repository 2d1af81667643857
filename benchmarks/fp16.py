"""fp16 against fp32 on the `opencl` backend: latency, device memory, and what mixed precision keeps.

Usage: python benchmarks/fp16.py [--repeat N] [MODEL.onnx ...]
Without models it uses the bundled example and three of ONNX's light models. Each model is lowered
three ways — fp32, precision=fp16 calibrated on its input (mixed: values past half stay float32),
and precision=fp16 with mixed=0 (every float32 value half) — and run alternately in one process
(onnxruntime's figure, measured in the same run, sets the scale). Per model it prints the median
latency of each and the ratios fp16/fp32, the device bytes each keeps (weights and the buffers of
its specializations), how many float32 values mixed precision kept float32, and the error of each
fp16 plan's output against onnxruntime's in float32 (relative to the output's largest value; a
non-finite output prints as inf). On PoCL the "device" is this machine's CPU: half storage
halves the bytes moved but PoCL converts every load and store, so the timing says little about a
GPU; the memory and the kept share carry over.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from common import inputs  # benchmarks/common.py (run as a script)

import offload

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "tiny_cnn.onnx")
DEFAULT = [
    EXAMPLE,
    *(os.path.join(LIGHT, f"light_{m}.onnx") for m in ("squeezenet", "resnet50", "inception_v1")),
]
VARIANTS = {
    "fp32": None,
    "fp16 mixed": {"opencl": {"precision": "fp16"}},
    "fp16 all": {"opencl": {"precision": "fp16", "mixed": "0"}},
}


def device_bytes(module) -> int:
    """Bytes of device memory the opencl delegates of ``module`` hold (distinct buffers)."""
    seen: dict[int, int] = {}
    for method in (module.method(n) for n in module.method_names):
        for d in method._all_delegates():
            handle = d.handle
            if handle is None:
                continue
            buffers = [*handle.weights.values()]
            for spec in handle.specializations.entries.values():
                buffers += [*spec.buffers.values(), *spec.own]
            for b in buffers:
                seen[id(b)] = int(getattr(b, "size", 0))
    return sum(seen.values())


def kept(program) -> tuple[int, int]:
    """(values kept float32, float32 values) over the program's opencl delegates."""
    k = n = 0
    for op in program.main.body.walk():
        if op.op_type == "Delegate":
            plan = json.loads(bytes(op.attributes["processed"]))
            k += len(plan.get("fp32", {}))
            n += sum(t == "float32" for t in plan["dtypes"].values())
    return k, n


def error(got: np.ndarray, want: np.ndarray) -> float:
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    print(
        f"{'model':22s} {'ort ms':>7s} {'fp32 ms':>8s} {'mixed ms':>9s} {'half ms':>8s} {'mixed/32':>9s} "
        f"{'fp32 MB':>8s} {'mixed MB':>9s} {'half MB':>8s} {'kept':>9s} {'mixed err':>10s} {'half err':>9s}"
    )
    for path in args.models or DEFAULT:
        with open(path, "rb") as f:
            data = f.read()
        program = offload.load(data)
        feeds = inputs(program)
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
        modules, lowered = {}, {}
        for name, specs in VARIANTS.items():
            lowered[name] = offload.to_backend(
                program, "opencl", specs, calibration=[feeds] if specs else None
            )
            modules[name] = offload.runtime.load(offload.save(lowered[name]))
            modules[name].run(feeds)  # warm-up: specializations, first touches
        times: dict[str, list[float]] = {name: [] for name in ["ort", *VARIANTS]}
        for _ in range(args.repeat):  # alternating, so that a busy moment hits every variant
            start = time.perf_counter()
            session.run(None, feeds)
            times["ort"].append(time.perf_counter() - start)
            for name, module in modules.items():
                start = time.perf_counter()
                module.run(feeds)
                times[name].append(time.perf_counter() - start)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        mb = {name: device_bytes(m) / 1e6 for name, m in modules.items()}
        errs = {name: error(next(iter(modules[name].run(feeds).values())), want) for name in VARIANTS}
        k, n = kept(lowered["fp16 mixed"])
        print(
            f"{os.path.basename(path)[:22]:22s} {ms['ort']:7.2f} {ms['fp32']:8.2f} {ms['fp16 mixed']:9.2f} "
            f"{ms['fp16 all']:8.2f} {ms['fp16 mixed'] / ms['fp32']:9.2f} {mb['fp32']:8.2f} "
            f"{mb['fp16 mixed']:9.2f} {mb['fp16 all']:8.2f} {f'{k}/{n}':>9s} "
            f"{errs['fp16 mixed']:10.1e} {errs['fp16 all']:9.1e}"
        )


if __name__ == "__main__":
    main()
