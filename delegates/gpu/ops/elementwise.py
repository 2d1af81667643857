"""Elementwise ops: one generated kernel per fused tree (a single op is a one-node tree).

Each leaf is read through its own stride table (numpy broadcasting, rank ≤ 6); intermediates
live in registers. The source is generated from the plan step alone, deterministically, so the
same step always hits the build cache.
"""

from __future__ import annotations

import math

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType

from ...backend import OpCapability, Support
from ..api import MAX_RANK, Buf, Builder, Ints, broadcast_strides, pad

_F32 = frozenset({DataType.FLOAT})

UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "LeakyRelu")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")

CAPS = {op: OpCapability(_F32, max_rank=MAX_RANK) for op in (*UNARY, *BINARY, "Clip")}
ELEMENTWISE = frozenset(CAPS)


def check(op) -> Support | None:
    if op.op_type in BINARY and len(op.inputs) != 2:
        return Support(False, f"{op.op_type} with {len(op.inputs)} inputs (takes 2)")
    return None


CHECKS = dict.fromkeys(CAPS, check)


def _f(x: float) -> str:
    """A float32 literal of OpenCL C."""
    x = float(np.float32(x))
    if not math.isfinite(x):
        return "(INFINITY)" if x > 0 else "(-INFINITY)" if x < 0 else "(NAN)"
    return f"({x!r}f)"


_SIMPLE = {
    "Relu": "(x0 < 0.0f ? 0.0f : x0)",
    "Sigmoid": "(x0 >= 0.0f ? 1.0f / (1.0f + exp(-x0)) : exp(x0) / (1.0f + exp(x0)))",
    "Tanh": "tanh(x0)",
    "Exp": "exp(x0)",
    "Log": "log(x0)",
    "Sqrt": "sqrt(x0)",
    "Neg": "(-x0)",
    "Abs": "fabs(x0)",
    "Add": "(x0 + x1)",
    "Sub": "(x0 - x1)",
    "Mul": "(x0 * x1)",
    "Div": "(x0 / x1)",
    "Max": "((isnan(x0) || x0 > x1) ? x0 : x1)",
    "Min": "((isnan(x0) || x0 < x1) ? x0 : x1)",
}


def expr(op_type: str, attrs: dict, arity: int) -> str:
    """The OpenCL C expression of an elementwise op over x0, x1, …"""
    if op_type in _SIMPLE:
        return _SIMPLE[op_type]
    if op_type == "LeakyRelu":
        return f"(x0 < 0.0f ? {_f(attrs.get('alpha', 0.01))} * x0 : x0)"
    if op_type == "Clip":
        lo = "x1" if arity > 1 else "(-INFINITY)"
        hi = "x2" if arity > 2 else "(INFINITY)"
        return f"(isnan(x0) ? x0 : fmin(fmax(x0, {lo}), {hi}))"
    raise UnsupportedOpError(f"gpu backend: no elementwise kernel for {op_type}")


def fused_source(nodes: list[dict], n_leaves: int) -> str:
    """One kernel for a tree of elementwise nodes (plan "Fused" step): leaves are loaded once,
    each through its own stride table, and the intermediates live in registers."""
    funcs, body = [], []
    for j, node in enumerate(nodes):
        args = list(node["args"])
        while args and args[-1] is None:
            args.pop()
        arity = len(args)
        params = ", ".join(f"const float x{k}" for k in range(arity))
        funcs.append(
            f"// {node['type']}\ninline float f{j}({params}) {{ return {expr(node['type'], node['attributes'], arity)}; }}"
        )
        vals = []
        for k, a in enumerate(args):
            if a is None:  # an absent Clip bound
                vals.append("(-INFINITY)" if k == 1 else "(INFINITY)")
            elif a[0] == "in":
                if not 0 <= int(a[1]) < n_leaves:
                    raise ModelFormatError(f"gpu backend: fused node {j} reads leaf {a[1]}")
                vals.append(f"x{int(a[1])}")
            elif a[0] == "node" and 0 <= int(a[1]) < j:
                vals.append(f"t{int(a[1])}")
            else:
                raise ModelFormatError(f"gpu backend: fused node {j} has argument {a!r}")
        body.append(f"const float t{j} = f{j}({', '.join(vals)});")
    params = "".join(f", __global const float* a{i}" for i in range(n_leaves))
    offs = " ".join(f"int o{i} = 0;" for i in range(n_leaves))
    steps = " ".join(f"o{i} += j * meta[{MAX_RANK * (i + 1)} + d];" for i in range(n_leaves))
    loads = " ".join(f"const float x{i} = a{i}[o{i}];" for i in range(n_leaves))
    nl = "\n    "
    return f"""// generated: fused {"+".join(n["type"] for n in nodes)}
{chr(10).join(funcs)}
__kernel void ew(__global float* out{params}, __global const int* meta, const int n) {{
    const int gid = get_global_id(0);
    if (gid >= n) return;
    int rem = gid; {offs}
    for (int d = {MAX_RANK - 1}; d >= 0; --d) {{
        const int s = meta[d]; const int j = rem % s; rem /= s; {steps}
    }}
    {loads}
    {nl.join(body)}
    out[gid] = t{len(nodes) - 1};
}}
"""


def as_tree(step: dict) -> dict:
    """A single elementwise op as a one-node "Fused" step (absent trailing inputs dropped)."""
    ins = list(step["inputs"])
    while ins and ins[-1] is None:
        ins.pop()
    leaves = [i for i in ins if i is not None]
    args, k = [], 0
    for i in ins:
        if i is None:
            args.append(None)
        else:
            args.append(["in", k])
            k += 1
    node = {"type": step["type"], "name": step.get("name"), "attributes": step["attributes"], "args": args}
    return {**step, "type": "Fused", "inputs": leaves, "nodes": [node]}


def launch_fused(b: Builder, step: dict) -> None:
    ins, (out,) = step["inputs"], step["outputs"]
    out_shape = b.shape(out)
    meta = pad(out_shape, 1)
    for i in ins:
        meta += pad(broadcast_strides(b.shape(i), out_shape), 0)
    n = math.prod(out_shape)
    program = b.program(fused_source(step["nodes"], len(ins)))
    b.launch(program, "ew", (n,), None, [Buf(out), *(Buf(i) for i in ins), Ints(tuple(meta)), np.int32(n)])


def launch(b: Builder, step: dict) -> None:
    launch_fused(b, as_tree(step))


LAUNCH = {**dict.fromkeys(CAPS, launch), "Fused": launch_fused}
