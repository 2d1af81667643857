"""Per-instruction overhead of the CPU executor against onnxruntime: chains of tiny ops.

Usage: python benchmarks/overhead.py [--ops N] [--repeat N]
Each chain is N ops on a 16-element float32 tensor (Add of a constant, Relu, Mul by a constant,
Neg, Abs, Sigmoid, Tanh, as each chain's name lists them), run by offload.runtime from a .pte (no
graph passes: the chain is what runs) and by onnxruntime's CPU provider (one thread, graph
optimizations off, so it runs the N ops too), in one process; prints µs per op of each and
their ratio (offload / onnxruntime).
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from common import median_ms  # benchmarks/common.py (run as a script)
from onnx import TensorProto, helper, numpy_helper

import offload

CHAINS = {
    "binary (Add, Mul)": ["Add", "Mul"],
    "unary one-pass (Relu, Neg, Tanh, Abs)": ["Relu", "Neg", "Tanh", "Abs"],
    "unary (Relu, Sigmoid, Tanh)": ["Relu", "Sigmoid", "Tanh"],
    "mixed (Add, Relu, Mul, Sigmoid)": ["Add", "Relu", "Mul", "Sigmoid"],
}


def chain(ops: list[str], n: int) -> bytes:
    nodes, inits = [], [numpy_helper.from_array(np.full(16, 0.5, np.float32), "c")]
    prev = "x"
    for i in range(n):
        op = ops[i % len(ops)]
        out = f"v{i}"
        nodes.append(helper.make_node(op, [prev, "c"] if op in ("Add", "Mul") else [prev], [out]))
        prev = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32)}
    print(f"{'chain of ' + str(args.ops):40s} {'offload µs/op':>14s} {'ort µs/op':>10s} {'ratio':>7s}")
    for name, ops in CHAINS.items():
        data = chain(ops, args.ops)
        method = offload.runtime.load(offload.save(offload.load(data))).method("forward")
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        ours = median_ms(method.run, (feeds,), args.repeat) * 1e3 / args.ops
        theirs = median_ms(session.run, (None, feeds), args.repeat) * 1e3 / args.ops
        print(f"{name:40s} {ours:14.2f} {theirs:10.2f} {ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
