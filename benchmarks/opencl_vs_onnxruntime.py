"""Times the OpenCL backend, offload's CPU runtime and onnxruntime on the same models, in one process.

Usage: python benchmarks/opencl_vs_onnxruntime.py [--repeat N] [--device SPEC] [MODEL.onnx ...]
Without models it uses ONNX's bundled light models. Per model it prints: how many ops the
`opencl` backend took, the kernel build time at init with an empty cache (cold) and with the
on-disk cache filled by the cold run (warm: a new process would see this), the median run time of
the OpenCL .pte, the CPU .pte and onnxruntime, and the ratios OpenCL / onnxruntime and
CPU / onnxruntime (lower is better for offload), and the geometric means of both. The three
runs alternate (``common.alternating_ms``). On PoCL the "device" is this machine's CPU.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import tempfile
import time

import onnx
import onnxruntime as ort
from common import alternating_ms, inputs  # benchmarks/common.py (run as a script)

import offload
from offload.delegates.opencl import device as cl_device

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _init_seconds(data: bytes) -> tuple[float, object]:
    """Load the .pte (delegate init builds the kernels); in-process program cache emptied first."""
    cl_device.clear_memory_cache()
    start = time.perf_counter()
    module = offload.runtime.load(data)
    return time.perf_counter() - start, module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default=None, help="the opencl `device` compile spec")
    args = parser.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(LIGHT, "*.onnx")))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.log_severity_level = 3
    specs = {"opencl": {"device": args.device}} if args.device else None
    print(
        f"{'model':24s} {'on device':>10s} {'cold s':>7s} {'warm s':>7s} "
        f"{'opencl ms':>10s} {'cpu ms':>8s} {'ort ms':>8s} {'cl/ort':>7s} {'cpu/ort':>8s}"
    )
    ratios = []
    for path in models:
        name = os.path.basename(path)[: -len(".onnx")]
        program = offload.load(path)
        feeds = inputs(program)
        total = len(program.main.body.operations)
        lowered = offload.to_backend(program, "opencl", compile_specs=specs)
        inside = sum(
            len(op.attributes["fallback"].operations)
            for op in lowered.main.body.operations
            if op.op_type == "Delegate"
        )
        data = offload.save(lowered)
        # cold: an empty disk cache of this model's own; warm: the same cache, a fresh process
        os.environ["OFFLOAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="offload-bench-cache-")
        cold, _ = _init_seconds(data)
        warm, module = _init_seconds(data)
        on_cl = module.method("forward")
        on_cpu = offload.runtime.load(offload.save(program)).method("forward")
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        t_cl, t_cpu, t_ort = alternating_ms(
            [(on_cl.run, (feeds,)), (on_cpu.run, (feeds,)), (session.run, (None, feeds))], args.repeat
        )
        print(
            f"{name:24s} {f'{inside}/{total}':>10s} {cold:7.2f} {warm:7.2f} "
            f"{t_cl:10.1f} {t_cpu:8.1f} {t_ort:8.1f} {t_cl / t_ort:7.2f} {t_cpu / t_ort:8.2f}"
        )
        ratios.append((t_cl / t_ort, t_cpu / t_ort))
    cl_mean = statistics.geometric_mean(r[0] for r in ratios)
    cpu_mean = statistics.geometric_mean(r[1] for r in ratios)
    print(
        f"{'geometric mean':24s} {'':>10s} {'':7s} {'':7s} {'':10s} {'':8s} {'':8s} {cl_mean:7.2f} {cpu_mean:8.2f}"
    )


if __name__ == "__main__":
    main()
