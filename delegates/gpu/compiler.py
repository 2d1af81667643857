"""The compile half shared by the GPU backends: which ops they take, and preprocess → JSON plan.

The plan (``plan.py``) holds no kernel source: each runtime generates or loads its kernels at init
from the plan, so one blob format serves every device.
"""

from __future__ import annotations

import json
import math

import numpy as np

from offload.errors import DTypeError, UnsupportedOpError
from offload.ir import Operation, Program, TensorType, Value, attributes_of
from offload.ir.rewrite import reads

from ..backend import BackendCompiler, CompileSpec, CompileSpecError, PreprocessResult, Support
from . import control, ops
from .epilogue import ADDS, epilogues, residual
from .host import host_inputs
from .ops import ELEMENTWISE
from .plan import FORMAT, MAX_ELEMENTS, PRECISIONS
from .precision import flag_spec, fp16_check, keep_fp32, mixed, too_wide
from .shuffle import shuffles
from .specialize import max_shapes, shape_sets

# The op tables of the families, and If / Loop (``control.py``: recorded by the builder itself).
CAPABILITIES = {**ops.CAPABILITIES, **control.CAPS}
CHECKS = {**ops.CHECKS, **control.CHECKS}
MULTI_OUTPUT = ops.MULTI_OUTPUT | frozenset(control.MULTI_OUTPUT)

PRECISION_SPEC = (
    "fp32 (default) | fp16: store every float32 value on the device as half (kernels compute in float32)"
)


def _attr(v):
    """An attribute as plan JSON (numbers, text, lists of numbers), or None when it is not one."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float | str):
        return v
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":  # a tensor attribute keeps its dtype
        return {"array": v.ravel().tolist(), "dtype": v.dtype.name, "shape": list(v.shape)}
    if isinstance(v, list | tuple) and v and all(isinstance(x, str) for x in v):  # e.g. RNN activations
        return list(v)
    if isinstance(v, list | tuple) and all(isinstance(x, int | float | np.integer | np.floating) for x in v):
        return [x.item() if hasattr(x, "item") else x for x in v]
    return None


class _Ids:
    """Numbers the values of a partition in the order the plan first meets them."""

    def __init__(self):
        self._ids: dict[int, int] = {}
        self.values: dict[int, Value] = {}  # id → value

    def __call__(self, v: Value | None) -> int | None:
        if v is None:
            return None
        i = self._ids.setdefault(id(v), len(self._ids))
        self.values[i] = v
        return i

    def known(self, v: Value) -> bool:
        return id(v) in self._ids


def _dim(d) -> int | str | None:
    """A dim as the plan holds it: a size, a symbol's name, or None (unknown until run time)."""
    return int(d) if isinstance(d, int) else d


def _attrs(op: Operation) -> dict:
    attrs = attributes_of(op)
    return {k: _attr(a) for k, a in attrs.items() if _attr(a) is not None}


def _fusion_groups(body, residuals: bool = True) -> list[list[int]]:
    """The partition's ops as groups of step indices, in plan order.

    An elementwise op joins the group of the elementwise op producing one of its inputs when that
    value is used by this op alone (a branch or loop body reading it counts as a use) and is not a
    result of the block: each group is then a tree whose intermediates are read only inside it,
    and it is emitted at its root (its last op). An op that runs as its producer's epilogue
    (``epilogue.py``: a Conv's residual Add and Relu; the Add only where values are stored as
    float32, ``residuals``) joins that producer's group instead, a Conv first. Such a group runs
    where its last op stood; a residual Add is left out of it when a group that reads the residual
    would then run after it (the Conv overwrites the residual).
    """
    ops = body.operations
    users: dict[int, set[int]] = {}
    for s, op in enumerate(ops):
        for v in reads(op):  # a branch or loop body reading a value counts as a use
            users.setdefault(id(v), set()).add(s)
    outputs = {id(v) for v in body.outputs}
    producer = {id(v): s for s, op in enumerate(ops) for v in op.outputs if v is not None}
    kept: set[int] = set()  # residual Adds left unfused: a reader of the residual would run late
    while True:
        fused = epilogues(ops, users, outputs, residuals, kept)
        group_of = _grouped(ops, users, outputs, producer, fused)
        late = set()
        for a in fused:
            if ops[a].op_type in ADDS:  # the Conv writes into the residual when its group runs
                r = residual(ops[a], ops[fused[a]].outputs[0])
                if any(group_of[t][-1] > group_of[a][-1] for t in users[id(r)] if t != a):
                    late.add(a)
        if not late:
            break
        kept |= late
    seen, result = set(), []
    for s in range(len(ops)):
        g = group_of[s]
        if g[-1] == s and id(g) not in seen:
            seen.add(id(g))
            result.append(g)
    return result


def _grouped(ops, users, outputs, producer, fused) -> dict[int, list[int]]:
    """Each step's group (a list shared by its members), by ``_fusion_groups``' rule."""
    group_of: dict[int, list[int]] = {}
    for s, op in enumerate(ops):
        group = [s]
        if s in fused:
            group = sorted({*group_of[fused[s]], s})
        elif op.op_type in ELEMENTWISE:
            for v in op.inputs:
                if v is None or id(v) in outputs or users.get(id(v)) != {s}:
                    continue
                p = producer.get(id(v))
                if p is None or p in fused or ops[p].op_type not in ELEMENTWISE or group_of[p] is group:
                    continue
                group = sorted({*group_of[p], *group})
        for t in group:
            group_of[t] = group
    return group_of


def _with_epilogue(ops: list[Operation], vid, x: Value | None = None) -> dict:
    """One plan step for a Conv and the ops fused into it as its epilogue (``epilogue.py``);
    ``x``: the value the step reads in place of the Conv's first input (a shuffle's source)."""
    conv, *chain = ops
    step = {
        "type": conv.op_type,
        "name": conv.name,
        "attributes": _attrs(conv),
        "inputs": [vid(v) for v in ([x, *conv.inputs[1:]] if x is not None else conv.inputs)],
        "outputs": [vid((chain or ops)[-1].outputs[0])],
    }
    if chain:
        step["epilogue"] = ["Add" if op.op_type in ADDS else op.op_type for op in chain]
    prev = conv.outputs[0]
    for op in chain:
        if op.op_type in ADDS:
            step["residual"] = vid(residual(op, prev))
        prev = op.outputs[0]
    return step


def _mark_columns(step: dict, shapes: dict) -> None:
    """A Conv step with more than one input channel per group (``W``'s dim 1) gets implicit
    im2col columns (plan format 8): a depthwise one runs direct and gathers nothing."""
    if step["type"] != "Conv" or len(step["inputs"]) < 2 or step["inputs"][1] is None:
        return
    w = shapes.get(str(step["inputs"][1]))
    if w is not None and len(w) > 1 and w[1] != 1:
        step["columns"] = "implicit"


def _single(op: Operation, vid) -> dict:
    """The plan step of one op."""
    return {
        "type": op.op_type,
        "name": op.name,
        "attributes": _attrs(op),
        "inputs": [vid(v) for v in op.inputs],
        "outputs": [vid(v) for v in op.outputs],
    }


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


IMPLICIT_CONV_SPEC = (
    "1 (default) | 0: on a GPU device, a Conv whose GEMM reads im2col columns gathers them from its "
    "input in one launch (conv_gemm); 0: the columns are written to a buffer first, then the GEMM "
    "(cuBLAS on CUDA)"
)


def implicit_conv(specs: list[CompileSpec], backend: str) -> bool:
    """The ``implicit_conv`` spec (True when absent)."""
    return flag_spec(specs, "implicit_conv", True, backend)


def precision(specs: list[CompileSpec], backend: str) -> str:
    """The ``precision`` spec ("fp32" when absent); CompileSpecError for any other value."""
    found = "fp32"
    for spec in specs:
        if spec.key == "precision":
            found = spec.text()
            if found not in PRECISIONS:
                raise CompileSpecError(
                    f"{backend} backend: precision={found!r}, takes one of {list(PRECISIONS)}"
                )
    return found


class GPUCompiler(BackendCompiler):
    """Subclasses set ``name`` and ``spec_keys`` (with "precision": PRECISION_SPEC); the op table
    is the shared one."""

    capabilities = CAPABILITIES
    quantized_as_float = True  # float kernels only, as the TFLite GPU delegate runs int8 models

    def stores_half(self, compile_specs: list[CompileSpec]) -> bool:
        return precision(compile_specs, self.name) == "fp16"

    def check_specs(self, specs: list[CompileSpec]) -> None:
        super().check_specs(specs)
        precision(specs, self.name)
        fp16_check(specs, self.name)
        mixed(specs, self.name)
        max_shapes(specs, self.name)
        shape_sets(specs, self.name)
        implicit_conv(specs, self.name)

    def supports(self, op: Operation, ctx=None) -> Support:
        found = super().supports(op, ctx)
        if not found:
            return found
        for v in [*op.inputs, *op.outputs]:
            # A tensor of unknown rank is planned with the rank it has when the plan specializes
            # (the branch a shape-decided If takes, a Squeeze of symbolic dims); an op whose check
            # needs the rank refuses it there.
            if v is not None and not isinstance(v.type, TensorType):
                return Support(False, f"'{v.name}' is not a tensor of known element type")
            if v is not None and v.type.is_static and math.prod(v.type.shape) > MAX_ELEMENTS:
                return Support(
                    False, f"'{v.name}' has more than {MAX_ELEMENTS} elements (kernels index with int32)"
                )
        outputs = [v for v in op.outputs if v is not None]
        if not outputs or (len(outputs) > 1 and op.op_type not in MULTI_OUTPUT):
            return Support(False, "ops with more than one output are not supported")
        check = CHECKS.get(op.op_type)
        try:
            found = check(op) if check is not None else None
        except DTypeError:  # the check's own error, not a symbolic dim
            raise
        except TypeError:  # a check that does arithmetic on a dim that is a symbol, or on no rank
            if any(v is not None and v.type.shape is None for v in [*op.inputs, *op.outputs]):
                return Support(False, f"{op.op_type} needs the rank of its tensors, unknown here")
            return Support(False, f"{op.op_type} needs static sizes where this op has symbolic dims")
        if found is not None:
            return found
        for block in op.blocks:  # an If's branches, a Loop's body: every op runs on the device
            for inner in block.operations:
                found = self.supports(inner, ctx)
                if not found:
                    return Support(
                        False, f"{op.op_type} body op '{inner.name or inner.op_type}': {found.reason}"
                    )
        return Support(True)

    def preprocess(self, subprogram: Program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        self.check_specs(compile_specs)
        body = subprogram.main.body
        ids = _Ids()
        shapes: dict[str, list[int]] = {}
        dtypes: dict[str, str] = {}

        def vid(v: Value | None) -> int | None:
            i = ids(v)
            if v is not None:
                # None: the rank is learnt at specialization (an If decided by a shape, a Squeeze
                # of symbolic dims without axes)
                shapes[str(i)] = None if v.type.shape is None else [_dim(d) for d in v.type.shape]
                dtypes[str(i)] = np.dtype(v.type.dtype.numpy).name
            return i

        plan = {"format": FORMAT, "inputs": [vid(v) for v in body.inputs], "weights": {}, "ops": []}
        stored = precision(compile_specs, self.name)
        implicit = implicit_conv(compile_specs, self.name)
        if stored != "fp32":  # absent means fp32: fp32 plans stay as they were
            plan["precision"] = stored
        for op in body.operations:
            support = self.supports(op)
            if not support:
                raise UnsupportedOpError(
                    f"{self.name} backend: op '{op.name or op.op_type}': {support.reason}"
                )

        def register(v: Value) -> None:
            """A constant the plan reads: a weight of the partition (given to init by name), or a
            small constant of a branch or body, which the plan holds itself."""
            if v is None or not v.is_constant or ids.known(v):
                return
            if body.constants.get(v.name) is v:
                plan["weights"][str(vid(v))] = v.name
            else:
                plan["constants"][str(vid(v))] = _attr(v.const_value)

        def steps(block) -> list[tuple[list[int], dict]]:
            """The block's plan steps, each with the indices of the ops it runs."""
            out = []
            shuffled = shuffles(block.operations, {id(v) for v in block.outputs})
            folded = {s for chain, _ in shuffled.values() for s in chain}
            for group in _fusion_groups(block, residuals=stored == "fp32"):
                if folded.intersection(group):  # a shuffle step: the Conv reading it takes it
                    continue
                ops = [block.operations[s] for s in group]
                shuffle = shuffled.get(group[0])
                for op in ops:
                    for v in op.inputs:
                        register(v)
                if shuffle is not None:  # a Conv reading a shuffle: it reads the shuffle's source
                    (chain, S), x = shuffle, block.operations[shuffle[0][0]].inputs[0]
                    register(x)
                    out.append((sorted([*chain, *group]), {**_with_epilogue(ops, vid, x), "shuffle": S}))
                    continue
                if len(ops) > 1 and ops[0].op_type == "Conv":
                    out.append((group, _with_epilogue(ops, vid)))
                    continue
                if len(ops) > 1:
                    out.append((group, _fused(ops, vid)))
                    continue
                (op,) = ops
                step = _single(op, vid)
                if op.op_type == "If":
                    step["branches"] = [sub(op.attributes[k]) for k in ("then_branch", "else_branch")]
                elif op.op_type == "Loop":
                    step["body"] = sub(op.attributes["body"])
                out.append((group, step))
            for _, step in out if implicit else ():
                _mark_columns(step, shapes)
            return out

        def sub(block) -> dict:
            for v in block.outputs:
                register(v)
            return {
                "inputs": [vid(v) for v in block.inputs],
                "ops": [step for _, step in steps(block)],
                "outputs": [vid(v) for v in block.outputs],
            }

        plan["constants"] = {}
        debug_map: dict[int, tuple[int, ...]] = {}
        for group, step in steps(body):
            plan["ops"].append(step)
            debug_map[len(plan["ops"]) - 1] = tuple(group)
        plan["outputs"] = [vid(v) for v in body.outputs]
        # Small partition inputs that shape-deciding inputs are computed from: read on the host
        # when the runtime specializes, their values part of its key.
        plan["names"] = [v.name for v in body.inputs]  # what the ``shapes`` spec names inputs by
        plan["host_inputs"] = [vid(v) for v in host_inputs(body)]
        plan["shapes"] = shapes
        plan["dtypes"] = dtypes
        if stored == "fp16" and mixed(compile_specs, self.name):
            wide = {}
            for i, v in ids.values.items():
                if dtypes[str(i)] == "float32":
                    why = too_wide(v.type.range)
                    if why is not None:
                        wide[i] = why
            keep_fp32(plan, wide, {i: v.name for i, v in ids.values.items()})
        return PreprocessResult(json.dumps(plan).encode(), debug_map)
