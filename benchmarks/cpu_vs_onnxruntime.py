"""Times offload's CPU runtime (.pte) against onnxruntime on the same models, in one process.

Usage: [OPENBLAS_NUM_THREADS=N] python benchmarks/cpu_vs_onnxruntime.py [--repeat N] [--threads N]
    [--mobile] [MODEL.onnx ...]
Without models it uses ONNX's bundled light models; --mobile uses the mobile convnets of
benchmarks/mobile (MobileNetV3-Small, MobileNetV2, ShuffleNetV2 x0.5 from torchvision, their
weights filled by benchmarks/common.py). Each model goes through the default graph
passes (as `offload compile` does; --no-passes skips them), is compiled to .pte in memory and
run by offload.runtime; the two runs alternate (so that both see the same load of a shared
machine); prints the median time of each and the ratio offload / onnxruntime (lower is better
for offload), and the geometric mean of the ratios. --threads sets onnxruntime's intra-op threads
(default: the machine's cores); offload's convolutions and products run in numpy's BLAS, whose
threads OPENBLAS_NUM_THREADS sets (read when numpy loads, hence an environment variable).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics

import onnx
import onnxruntime as ort
from common import MOBILE, alternating_ms, inputs, model_bytes  # benchmarks/common.py (run as a script)

import offload

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mobile", action="store_true", help="the mobile convnets of benchmarks/mobile")
    parser.add_argument("--no-passes", action="store_true", help="run the graph as the file has it")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="onnxruntime's threads")
    args = parser.parse_args()
    models = args.models or sorted(glob.glob(os.path.join(MOBILE if args.mobile else LIGHT, "*.onnx")))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.log_severity_level = 3  # no warnings about unused initializers in the light models
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "its default")
    print(f"onnxruntime {args.threads} intra-op threads, OpenBLAS {blas} threads")
    print(f"{'model':28s} {'offload ms':>11s} {'ort ms':>9s} {'ratio':>7s}")
    ratios = []
    for path in models:
        data = model_bytes(path)
        feeds = inputs(offload.load(data))
        program = offload.load(data)
        if not args.no_passes:
            program = offload.optimize(program)
        method = offload.runtime.load(offload.save(program)).method("forward")
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        ours, theirs = alternating_ms([(method.run, (feeds,)), (session.run, (None, feeds))], args.repeat)
        name = os.path.basename(path)[: -len(".onnx")]
        print(f"{name:28s} {ours:11.2f} {theirs:9.2f} {ours / theirs:7.2f}")
        ratios.append(ours / theirs)
    print(f"{'geometric mean':28s} {'':11s} {'':9s} {statistics.geometric_mean(ratios):7.2f}")


if __name__ == "__main__":
    main()
