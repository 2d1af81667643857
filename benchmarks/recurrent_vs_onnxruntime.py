"""Times offload's CPU runtime on small recurrent models (LSTM, GRU; batch 1) against onnxruntime.

Usage: OPENBLAS_NUM_THREADS=1 python benchmarks/recurrent_vs_onnxruntime.py [--repeat N] [--threads N]
    [--grid]
The models are built here with ``onnx.helper`` (seeded weights, no initial states): per op (LSTM,
GRU) one forward net at each of sequence 8/16/32 with hidden 64/128/256 (paired: 8 with 64, 16
with 128, 32 with 256; ``--grid`` takes all nine pairs), a bidirectional one and a 2-layer stack
at sequence 16, hidden 128 (input size 64 throughout; the forward GRUs with linear_before_reset
0, ONNX's default, the others with 1, as PyTorch exports them), plus the exported nets of
tests/models (lstm_model.onnx: embedding, two bidirectional LSTM layers and a head;
gru_model.onnx: two GRU layers and a head) at batch 1, sequence 16. Each goes through the
default graph passes (as ``offload compile`` does), is compiled to .pte in memory and run by
offload.runtime; the runs alternate with onnxruntime's (``common.alternating_ms``); prints the
median time of each, the ratio offload / onnxruntime (lower is better for offload) and the
geometric mean of the ratios. Every offload output is checked against onnxruntime's first
(rtol = atol = 1e-4). --threads sets onnxruntime's intra-op threads (default 1); offload's
products run in numpy's BLAS, whose threads OPENBLAS_NUM_THREADS sets (read when numpy loads).
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
import onnxruntime as ort
from common import alternating_ms  # benchmarks/common.py (run as a script)
from onnx import TensorProto, helper, numpy_helper

import offload

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "models")
GATES = {"LSTM": 4, "GRU": 3}
INPUT = 64


def recurrent(
    op: str, seq: int, hidden: int, direction: str = "forward", layers: int = 1
) -> tuple[bytes, dict]:
    """A net of ``layers`` ``op`` layers on X [seq, 1, INPUT], its Y (the last layer's, all
    steps) and the last layer's Y_h as outputs; the serialized model and its feeds."""
    rng = np.random.default_rng(seq * 1000 + hidden)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    nodes, inits = [], []
    x, size = "X", INPUT
    for k in range(layers):
        scale = 1 / np.sqrt(hidden)
        for name, shape in (
            ("W", (dirs, g * hidden, size)),
            ("R", (dirs, g * hidden, hidden)),
            ("B", (dirs, 2 * g * hidden)),
        ):
            a = (rng.standard_normal(shape) * scale).astype(np.float32)
            inits.append(numpy_helper.from_array(a, f"{name}{k}"))
        attrs = {"linear_before_reset": int(direction != "forward" or layers > 1)} if op == "GRU" else {}
        y, y_h = f"Y{k}", f"Y_h{k}"
        nodes.append(
            helper.make_node(
                op, [x, f"W{k}", f"R{k}", f"B{k}"], [y, y_h], hidden_size=hidden, direction=direction, **attrs
            )
        )
        if k + 1 < layers:  # [seq, dirs, 1, hidden] → [seq, 1, dirs * hidden]
            nodes.append(helper.make_node("Transpose", [y], [f"T{k}"], perm=[0, 2, 1, 3]))
            inits.append(numpy_helper.from_array(np.array([seq, 1, dirs * hidden], np.int64), f"S{k}"))
            nodes.append(helper.make_node("Reshape", [f"T{k}", f"S{k}"], [f"X{k + 1}"]))
            x, size = f"X{k + 1}", dirs * hidden
    graph = helper.make_graph(
        nodes,
        f"{op.lower()}_{direction}_{seq}x{hidden}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, 1, INPUT])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in (y, y_h)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {"X": rng.standard_normal((seq, 1, INPUT)).astype(np.float32)}
    return model.SerializeToString(), feeds


def exported(name: str, seq: int = 16) -> tuple[bytes, dict]:
    """tests/models' exported recurrent net at batch 1 and ``seq`` steps, with seeded feeds."""
    with open(os.path.join(MODELS, name), "rb") as f:
        data = f.read()
    rng = np.random.default_rng(seq)
    if name == "lstm_model.onnx":  # token ids into a 100-row embedding
        feeds = {"tokens": rng.integers(0, 100, (1, seq)).astype(np.int64)}
    else:
        feeds = {"x": rng.standard_normal((1, seq, 8)).astype(np.float32)}
    return data, feeds


def cases(grid: bool) -> list[tuple[str, bytes, dict]]:
    pairs = [(s, h) for s in (8, 16, 32) for h in (64, 128, 256)] if grid else [(8, 64), (16, 128), (32, 256)]
    out = []
    for op in ("LSTM", "GRU"):
        for seq, hidden in pairs:
            out.append((f"{op.lower()} fwd s{seq} h{hidden}", *recurrent(op, seq, hidden)))
        out.append((f"{op.lower()} bidi s16 h128", *recurrent(op, 16, 128, "bidirectional")))
        out.append((f"{op.lower()} 2-layer s16 h128", *recurrent(op, 16, 128, layers=2)))
    for name in ("lstm_model.onnx", "gru_model.onnx"):
        out.append((f"tests/models/{name[:-5]}", *exported(name)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime's intra-op threads")
    parser.add_argument("--grid", action="store_true", help="all nine sequence/hidden pairs")
    args = parser.parse_args()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.log_severity_level = 3
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "its default")
    print(f"onnxruntime {args.threads} intra-op threads, OpenBLAS {blas} threads")
    print(f"{'model':28s} {'offload ms':>11s} {'ort ms':>9s} {'ratio':>7s}")
    # One thread each: no worker threads spin after a call, so a short pause between calls will do.
    pause = 0.05 if args.threads == 1 and blas == "1" else 0.2
    ratios = []
    for name, data, feeds in cases(args.grid):
        program = offload.optimize(offload.load(data))
        method = offload.runtime.load(offload.save(program)).method("forward")
        session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
        got = method.run(feeds)
        for w, (k, g) in zip(want, got.items()):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name}: {k}")
        calls = [(method.run, (feeds,)), (session.run, (None, feeds))]
        ours, theirs = alternating_ms(calls, args.repeat, pause=pause)
        print(f"{name:28s} {ours:11.3f} {theirs:9.3f} {ours / theirs:7.2f}")
        ratios.append(ours / theirs)
    print(f"{'geometric mean':28s} {'':11s} {'':9s} {statistics.geometric_mean(ratios):7.2f}")


if __name__ == "__main__":
    main()
