"""Counts what one steady-state run of a model costs the `opencl` backend in launches and traffic.

Usage: python benchmarks/gpu_launches.py [--device SPEC] [MODEL.onnx ...]
Without models it takes ONNX's light ResNet-50, SqueezeNet and ShuffleNet (the files the corpus
lists as onnx-light-*, shipped in the onnx wheel). Each is lowered to `opencl` with the default
passes and run twice; the second run is counted from the device's ``Traffic`` counters
(``delegates/opencl/device.py``). Per model it prints: the Conv/Gemm/MatMul ops of the model after
the passes, the kernel launches of one run on this opencl device, launches / (Conv + Gemm +
MatMul), the host<->device syncs (blocking copies and waits), the bytes copied host->device and
device->host against the bytes of the model's inputs and outputs; then, device-free, the launches
the same plans record for a GPU device (``gpu``: matmul.cl's GPU kernels, as the opencl backend
makes them on a GPU; ``cuda``: GEMMs as cuBLAS calls, each counted as one launch) and their
ratios. The targets: a ratio of at most 1.5, one sync per run, copies equal to the inputs' and
outputs' bytes. Counts are structural: the same on any device that takes the same kernel
variants (PoCL here takes the CPU ones: packed GEMMs whose computed operand is packed per run).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from common import inputs  # benchmarks/common.py (run as a script)

import offload
from offload.delegates.cuda.record import record
from offload.delegates.gpu.plan import parse
from offload.delegates.opencl import device as cl_device

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ("resnet50", "squeezenet", "shufflenet")
HEAVY = ("Conv", "Gemm", "MatMul")


def heavy_ops(program) -> int:
    """Conv, Gemm and MatMul ops of ``program`` (a fused conv of domain offload counts as a Conv)."""
    ops = 0
    for op in program.main.body.operations:
        body = op.attributes["fallback"].operations if op.op_type == "Delegate" else [op]
        ops += sum(1 for o in body if o.op_type in HEAVY or o.op_type.endswith("Conv"))
    return ops


def recorded(lowered, blas: bool) -> int:
    """Launches (cuBLAS calls included) the opencl delegates' plans record for a GPU device."""
    total = 0
    for op in lowered.main.body.operations:
        if op.op_type != "Delegate":
            continue
        plan = parse(op.attributes["processed"], "opencl")
        constants = op.attributes["fallback"].constants
        host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
        b = record(plan, host, blas=blas, device_kind="gpu")
        total += len(b.launches) + len(b.gemms)
    return total


def count(path: str, device: str | None) -> dict:
    """One model's counts (see the module docstring)."""
    program = offload.load(path)
    feeds = inputs(program)
    specs = {"opencl": {"device": device}} if device else None
    lowered = offload.to_backend(program, "opencl", compile_specs=specs)
    module = offload.runtime.load(offload.save(lowered))
    outputs = module.run(feeds)  # specializes; the next run is the steady state
    traffic = cl_device.device_for(device).allocator.traffic
    before = traffic.snapshot()
    outputs = module.run(feeds)
    after = traffic.snapshot()
    ops = heavy_ops(lowered)
    launches = after.launches - before.launches
    return {
        "ops": ops,
        "launches": launches,
        "syncs": after.syncs - before.syncs,
        "to_device": after.to_device - before.to_device,
        "to_host": after.to_host - before.to_host,
        "input_bytes": sum(np.asarray(x).nbytes for x in feeds.values()),
        "output_bytes": sum(
            np.asarray(x).nbytes for x in (outputs.values() if isinstance(outputs, dict) else outputs)
        ),
        "ratio": launches / max(ops, 1),
        "gpu": recorded(lowered, blas=False),
        "cuda": recorded(lowered, blas=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--device", default=None, help="the opencl `device` compile spec")
    args = parser.parse_args()
    models = args.models or [os.path.join(LIGHT, f"light_{m}.onnx") for m in MODELS]
    print(
        f"{'model':18s} {'conv+gemm':>9s} {'launches':>8s} {'ratio':>6s} {'syncs':>5s} "
        f"{'h->d bytes':>11s} {'inputs':>9s} {'d->h bytes':>11s} {'outputs':>9s} "
        f"{'gpu':>5s} {'ratio':>6s} {'cuda':>5s} {'ratio':>6s}"
    )
    for path in models:
        c = count(path, args.device)
        name = os.path.basename(path)[: -len(".onnx")]
        print(
            f"{name:18s} {c['ops']:9d} {c['launches']:8d} {c['ratio']:6.2f} {c['syncs']:5d} "
            f"{c['to_device']:11d} {c['input_bytes']:9d} {c['to_host']:11d} {c['output_bytes']:9d} "
            f"{c['gpu']:5d} {c['gpu'] / max(c['ops'], 1):6.2f} {c['cuda']:5d} {c['cuda'] / max(c['ops'], 1):6.2f}"
        )


if __name__ == "__main__":
    main()
