"""The compile half of the `opencl` backend: the float32 ops it takes, and preprocess → JSON plan."""

from __future__ import annotations

import json

import numpy as np

from offload.errors import UnsupportedOpError
from offload.ir import DataType, Operation, Program, TensorType, Value, lookup

from ..backend import BackendCompiler, CompileSpec, OpCapability, PreprocessResult, Support
from .plan import FORMAT

_F32 = frozenset({DataType.FLOAT})

UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "LeakyRelu")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")

CAPABILITIES: dict[str, OpCapability] = {
    **{op: OpCapability(_F32, max_rank=6) for op in (*UNARY, *BINARY, "Clip")},
    "MatMul": OpCapability(_F32, max_rank=6),
    "Gemm": OpCapability(_F32, max_rank=2),
    "Conv": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",)}),
    "MaxPool": OpCapability(
        _F32, max_rank=4, attributes={"auto_pad": ("NOTSET",), "ceil_mode": (0,), "storage_order": (0,)}
    ),
    "AveragePool": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",), "ceil_mode": (0,)}),
    "GlobalAveragePool": OpCapability(_F32, max_rank=4),
    "GlobalMaxPool": OpCapability(_F32, max_rank=4),
    "BatchNormalization": OpCapability(_F32, max_rank=6, attributes={"training_mode": (0,)}),
    "Softmax": OpCapability(_F32, max_rank=6),
    "Transpose": OpCapability(_F32, max_rank=6),
    "Concat": OpCapability(_F32, max_rank=6),
    # Copy-free: the output shares its input's device buffer (the shape / axes input must be a constant).
    **{op: OpCapability(_F32 | {DataType.INT64}) for op in ("Reshape", "Squeeze", "Unsqueeze")},
    **{op: OpCapability(_F32) for op in ("Flatten", "Identity")},
}

ALIASES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
_SPATIAL = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def _attr(v):
    """An attribute as plan JSON (numbers, text, lists of numbers), or None when it is not one."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float | str):
        return v
    if isinstance(v, list | tuple | np.ndarray) and all(
        isinstance(x, int | float | np.integer | np.floating) for x in v
    ):
        return [x.item() if hasattr(x, "item") else x for x in v]
    return None


SPEC_KEYS = {"device": "OpenCL device: 'P:D' (platform, device index), 'D' (index), or a name substring"}


class _Ids:
    """Numbers the values of a partition in the order the plan first meets them."""

    def __init__(self):
        self._ids: dict[int, int] = {}

    def __call__(self, v: Value | None) -> int | None:
        if v is None:
            return None
        return self._ids.setdefault(id(v), len(self._ids))

    def known(self, v: Value) -> bool:
        return id(v) in self._ids


def _static(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.is_static


def _attrs(op: Operation) -> dict:
    schema = lookup(op.domain, op.op_type)
    attrs = schema.with_defaults(op.attributes) if schema else dict(op.attributes)
    return {k: _attr(a) for k, a in attrs.items() if _attr(a) is not None}


ELEMENTWISE = frozenset((*UNARY, *BINARY, "Clip"))


def _fusion_groups(body) -> list[list[int]]:
    """The partition's ops as groups of step indices, in plan order.

    An elementwise op joins the group of the elementwise op producing one of its inputs when that
    value is used by this op alone and is not a partition output: each group is then a tree whose
    intermediates are read only inside it, and it is emitted at its root (its last op).
    """
    ops = body.operations
    users: dict[int, set[int]] = {}
    for s, op in enumerate(ops):
        for v in op.inputs:
            if v is not None:
                users.setdefault(id(v), set()).add(s)
    outputs = {id(v) for v in body.outputs}
    producer = {id(v): s for s, op in enumerate(ops) for v in op.outputs if v is not None}
    group_of: dict[int, list[int]] = {}  # step → its group (shared list)
    for s, op in enumerate(ops):
        group = [s]
        if op.op_type in ELEMENTWISE:
            for v in op.inputs:
                if v is None or id(v) in outputs or users.get(id(v)) != {s}:
                    continue
                p = producer.get(id(v))
                if p is None or ops[p].op_type not in ELEMENTWISE or group_of[p] is group:
                    continue
                group = sorted({*group_of[p], *group})
        for t in group:
            group_of[t] = group
    seen, result = set(), []
    for s in range(len(ops)):
        g = group_of[s]
        if g[-1] == s and id(g) not in seen:
            seen.add(id(g))
            result.append(g)
    return result


def _fused(ops: list[Operation], vid) -> dict:
    """One plan step for a fused elementwise tree: leaf inputs, and nodes in order (root last)."""
    leaves: list[int] = []
    node_of = {id(op.outputs[0]): j for j, op in enumerate(ops)}
    nodes = []
    for op in ops:
        args = []
        for v in op.inputs:
            if v is None:
                args.append(None)
            elif id(v) in node_of:
                args.append(["node", node_of[id(v)]])
            else:
                i = vid(v)
                if i not in leaves:
                    leaves.append(i)
                args.append(["in", leaves.index(i)])
        nodes.append({"type": op.op_type, "name": op.name, "attributes": _attrs(op), "args": args})
    return {
        "type": "Fused",
        "name": "+".join(op.name or op.op_type for op in ops),
        "attributes": {},
        "inputs": leaves,
        "outputs": [vid(ops[-1].outputs[0])],
        "nodes": nodes,
    }


class OpenCLCompiler(BackendCompiler):
    name = "opencl"
    spec_keys = SPEC_KEYS
    capabilities = CAPABILITIES

    def supports(self, op: Operation, ctx=None) -> Support:
        found = super().supports(op, ctx)
        if not found:
            return found
        for v in [*op.inputs, *op.outputs]:
            if v is not None and not _static(v):
                return Support(False, f"shape of '{v.name}' is not static")
        if op.op_type in BINARY and len(op.inputs) != 2:
            return Support(False, f"{op.op_type} with {len(op.inputs)} inputs (takes 2)")
        if len([v for v in op.outputs if v is not None]) != 1 or op.outputs[0] is None:
            return Support(False, "ops with more than one output are not supported")
        if op.op_type in ALIASES:
            if op.inputs[0] is None or op.inputs[0].type.dtype != DataType.FLOAT:
                return Support(False, f"{op.op_type} of a non-float32 tensor")
            if any(v is not None and not v.is_constant for v in op.inputs[1:]):
                return Support(False, f"{op.op_type} with a shape / axes input that is not a constant")
        if op.op_type in _SPATIAL and op.inputs[0].type.rank != 4:
            return Support(
                False, f"{op.op_type} of rank {op.inputs[0].type.rank} (only 2-D, NCHW, is supported)"
            )
        if op.op_type in ("Conv", "MaxPool", "AveragePool"):
            dil = op.attributes.get("dilations")
            if op.op_type != "Conv" and dil is not None and any(int(d) != 1 for d in dil):
                return Support(False, "pooling with dilations other than 1 is not supported")
        if op.op_type == "Concat" and (not op.inputs or any(v is None for v in op.inputs)):
            return Support(False, "Concat with an absent input")
        if op.op_type == "MatMul" and any(v.type.rank < 2 for v in op.inputs):
            return Support(False, "MatMul of a 1-D operand is not supported")
        return Support(True)

    def preprocess(self, subprogram: Program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        self.check_specs(compile_specs)
        body = subprogram.main.body
        ids = _Ids()
        shapes: dict[str, list[int]] = {}

        def vid(v: Value | None) -> int | None:
            i = ids(v)
            if v is not None:
                shapes[str(i)] = [int(d) for d in v.type.shape]
            return i

        plan = {"format": FORMAT, "inputs": [vid(v) for v in body.inputs], "weights": {}, "ops": []}
        for v in body.constants.values():
            if isinstance(v.type, TensorType) and v.type.dtype == DataType.FLOAT:
                plan["weights"][str(vid(v))] = v.name
        debug_map: dict[int, tuple[int, ...]] = {}
        for op in body.operations:
            support = self.supports(op)
            if not support:
                raise UnsupportedOpError(f"opencl backend: op '{op.name or op.op_type}': {support.reason}")
        groups = _fusion_groups(body)
        for steps in groups:
            ops = [body.operations[s] for s in steps]
            for op in ops:
                inputs = op.inputs[:1] if op.op_type in ALIASES else op.inputs
                for v in inputs:
                    if v is not None and v.is_constant and not ids.known(v):
                        plan["weights"][str(vid(v))] = v.name
            if len(ops) == 1:
                (op,) = ops
                inputs = op.inputs[:1] if op.op_type in ALIASES else op.inputs
                plan["ops"].append(
                    {
                        "type": op.op_type,
                        "name": op.name,
                        "attributes": _attrs(op),
                        "inputs": [vid(v) for v in inputs],
                        "outputs": [vid(v) for v in op.outputs],
                    }
                )
            else:
                plan["ops"].append(_fused(ops, vid))
            debug_map[len(plan["ops"]) - 1] = tuple(steps)
        plan["outputs"] = [vid(v) for v in body.outputs]
        plan["shapes"] = shapes
        return PreprocessResult(json.dumps(plan).encode(), debug_map)
