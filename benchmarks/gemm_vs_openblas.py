"""GFLOP/s of the `opencl` backend's MatMul against numpy's matmul (OpenBLAS), in one process.

Usage: python benchmarks/gemm_vs_openblas.py [--sizes 1024 ...] [--repeat N] [--device SPEC]
    [--tuning quick] [--variant NAME]
For each size n, an n x n by n x n float32 MatMul (the right operand a weight, uploaded once at
init) runs whole on `opencl`; its runs (input copied in, result copied out) alternate with
``numpy.matmul`` on the same arrays. Prints the median GFLOP/s of each, their ratio (opencl /
numpy, higher is better for offload), the matmul.cl variant the backend chose and the largest
difference from numpy's result. --variant forces one of ``linalg.VARIANTS`` (e.g. blocked8, the
GPU kernel PoCL ran before the packed CPU kernel). On PoCL both run on this machine's CPU cores.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.delegates.gpu.ops import linalg


def matmul_model(n: int, weight: np.ndarray) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString()


def chosen_variants(forced: str | None) -> tuple[list[str], object]:
    """A list that fills with the variants ``linalg.variant_for`` returns (``forced`` if given),
    and the original function."""
    seen, original = [], linalg.variant_for

    def recording(b, g):
        seen.append(forced or original(b, g))
        return seen[-1]

    linalg.variant_for = recording
    return seen, original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1024])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--device", default=None, help="the opencl `device` compile spec")
    parser.add_argument("--tuning", default=None, help="the opencl `tuning` compile spec (quick)")
    parser.add_argument("--variant", default=None, choices=list(linalg.VARIANTS), help="force a kernel")
    args = parser.parse_args()
    specs = {k: v for k, v in (("device", args.device), ("tuning", args.tuning)) if v}
    rng = np.random.default_rng(0)
    print(
        f"{'size':>6s} {'variant':>9s} {'opencl GF/s':>12s} {'numpy GF/s':>11s} {'ratio':>6s} {'max |diff|':>11s}"
    )
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        w = rng.standard_normal((n, n), dtype=np.float32)
        program = offload.load(matmul_model(n, w))
        lowered = offload.to_backend(program, "opencl", compile_specs={"opencl": specs} if specs else None)
        seen, original = chosen_variants(args.variant)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = f"{tmp}/gemm.pte"
                offload.save(lowered, path)
                method = offload.runtime.load(path).method("forward")
        finally:
            linalg.variant_for = original
        feeds = {"a": a}
        got = method.run(feeds)["y"]  # warm-up: first-touch allocations, caches
        want = np.matmul(a, w)
        ours, theirs = [], []
        for _ in range(args.repeat):  # alternating, so that both see the same machine load
            start = time.perf_counter()
            method.run(feeds)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            np.matmul(a, w)
            theirs.append(time.perf_counter() - start)
        flop = 2.0 * n**3
        g_ours, g_theirs = flop / statistics.median(ours) / 1e9, flop / statistics.median(theirs) / 1e9
        diff = float(np.abs(got - want).max())
        print(
            f"{n:6d} {','.join(sorted(set(seen))):>9s} {g_ours:12.1f} {g_theirs:11.1f} "
            f"{g_ours / g_theirs:6.2f} {diff:11.2e}"
        )


if __name__ == "__main__":
    main()
