"""Times the `cuda` backend (launch by launch, as a CUDA graph, with half storage) and onnxruntime
on the same models, in one process; for a machine with an NVIDIA GPU.

Usage: python benchmarks/cuda_vs_onnxruntime.py [--repeat N] [--pause S] [MODEL.onnx ...]
Without models it uses ONNX's bundled light models and the mobile convnets of
``benchmarks/mobile``. Per model it prints how many ops the `cuda` backend took, the init time
with an empty kernel cache (NVRTC builds every kernel: cold) and with CuPy's disk cache filled
(warm), the median run time of the cuda .pte three ways — fp32 launch by launch, fp32 replayed as
one CUDA graph (compile spec ``graph=1``), half storage (``precision=fp16``) — and onnxruntime's
(CPU execution provider, all cores: the runtime a user compares with when the GPU build is not
installed), the ratios to onnxruntime, the largest difference of each cuda output from
onnxruntime's relative to its largest value, and the geometric means. The runs alternate
(``common.alternating_ms``); a run includes the copies in and out.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from common import MOBILE, alternating_ms, inputs, model_bytes  # benchmarks/common.py (a script)

import offload
from offload.delegates.cuda import device as cuda_device

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
VARIANTS = {
    "fp32": {"cuda": {"graph": "0"}},
    "graph": {"cuda": {"graph": "1"}},
    "fp16": {"cuda": {"precision": "fp16"}},
}


def _load(data: bytes):
    """Load the .pte (delegate init builds or loads the kernels); in-process module cache emptied."""
    cuda_device._MODULES.clear()
    start = time.perf_counter()
    module = offload.runtime.load(data)
    return time.perf_counter() - start, module.method("forward")


def _error(got: dict, want: list) -> float:
    worst = 0.0
    for g, w in zip(got.values(), want):
        scale = float(np.max(np.abs(w))) or 1.0
        diff = np.abs(g.astype(np.float64) - w)
        worst = max(worst, float(np.max(diff)) / scale if np.all(np.isfinite(diff)) else float("inf"))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.02, help="seconds before each timed run")
    args = parser.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(LIGHT, "*.onnx"))) + sorted(
        glob.glob(os.path.join(MOBILE, "*.onnx"))
    )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.log_severity_level = 3
    print(
        f"{'model':24s} {'on cuda':>9s} {'cold s':>7s} {'warm s':>7s} {'fp32 ms':>8s} {'graph ms':>9s} "
        f"{'fp16 ms':>8s} {'ort ms':>8s} {'fp32/ort':>9s} {'graph/ort':>10s} {'fp16/ort':>9s} "
        f"{'err fp32':>9s} {'err fp16':>9s}"
    )
    ratios = []
    for path in models:
        name = os.path.basename(path)[: -len(".onnx")]
        data = model_bytes(path)
        program = offload.load(data)
        feeds = inputs(program)
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
        methods, cold = {}, 0.0
        # cold: an empty CuPy kernel cache of this model's own; warm: the same cache, filled
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="offload-bench-cupy-")
        for variant, specs in VARIANTS.items():
            lowered = offload.to_backend(program, "cuda", compile_specs=specs)
            pte = offload.save(lowered)
            seconds, methods[variant] = _load(pte)
            if variant == "fp32":
                cold = seconds
                warm, methods[variant] = _load(pte)
                inside = sum(
                    len(op.attributes["fallback"].operations)
                    for op in lowered.main.body.operations
                    if op.op_type == "Delegate"
                )
                total = len(program.main.body.operations)
        errors = {v: _error(m.run(feeds), want) for v, m in methods.items()}
        calls = [(m.run, (feeds,)) for m in methods.values()] + [(session.run, (None, feeds))]
        t32, tg, t16, tort = alternating_ms(calls, args.repeat, args.pause)
        ratios.append((t32 / tort, tg / tort, t16 / tort))
        print(
            f"{name:24s} {f'{inside}/{total}':>9s} {cold:7.2f} {warm:7.2f} {t32:8.2f} {tg:9.2f} "
            f"{t16:8.2f} {tort:8.2f} {t32 / tort:9.2f} {tg / tort:10.2f} {t16 / tort:9.2f} "
            f"{errors['fp32']:9.1e} {errors['fp16']:9.1e}",
            flush=True,
        )
    means = [statistics.geometric_mean(r[k] for r in ratios) for k in range(3)]
    print(
        f"{'geometric mean':24s} {'':>9s} {'':7s} {'':7s} {'':8s} {'':9s} {'':8s} {'':8s} "
        f"{means[0]:9.2f} {means[1]:10.2f} {means[2]:9.2f}"
    )


if __name__ == "__main__":
    main()
