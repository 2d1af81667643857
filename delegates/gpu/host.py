"""Which small values a GPU partition knows on the host when it specializes, and which it cannot.

Some inputs decide an op's output shape (Reshape's shape, Slice's starts, Pad's pads, Resize's
sizes, Reduce axes …: ``ir.SHAPE_FROM_VALUES``, the IR's one table of them), and a few more decide
how a kernel launches without deciding a shape (CumSum's axis, a Loop's trip count: a family's
``LAUNCH_INPUTS``); ``host_input_names`` joins the two. A GPU delegate takes such an op when the
value is known on the host at specialization, that is when it is

- a constant;
- computed from shapes and constants only (``Shape → Gather → Concat`` chains, through the ops
  ``ir.infer_fold`` folds): the runtime folds it from the concrete input shapes;
- a small tensor with no producer in the graph (a graph input): read on the host, its value part
  of the specialization key;
- computed by an op the partition does not take: it then arrives as a small partition input, read
  on the host like a graph input.

An If's condition known on the host the same way, from scalar inputs only (a flag, a sample rate;
a condition on a tensor's values stays on the device), is read there too: the If then records only
the branch it takes (``control._check_if``), and the inputs it comes from join the key.

A value computed from tensor data (NonZero, a Conv, a ReduceMax of activations) would make the
shape depend on data: the op stays on the CPU with that reason.
"""

from __future__ import annotations

import math

from offload.ir import SHAPE_FROM_VALUES, Operation, TensorType, Value, lookup
from offload.ir.infer_fold import FOLDABLE

# A host-read value is a shape vector or a scalar: anything larger is data.
MAX_HOST_ELEMENTS = 64
_MAX_DEPTH = 64  # producer chains longer than this are not shape arithmetic


def _small(v: Value, largest: int = MAX_HOST_ELEMENTS) -> bool:
    t = v.type
    return isinstance(t, TensorType) and t.is_static and math.prod(t.shape) <= largest


def host_reason(v: Value, depth: int = 0, largest: int = MAX_HOST_ELEMENTS) -> str | None:
    """None when ``v`` can be known on the host at specialization; otherwise why not. Inputs it
    comes from (graph inputs, values made outside the partition) may have ``largest`` elements."""
    if v.is_constant:
        return None
    op = v.producer
    if op is None:  # a graph input or a body parameter: read on the host when small
        return None if _small(v, largest) else f"'{v.name}' is not a small tensor (read on the host)"
    if op.op_type in ("Shape", "Size"):
        return None
    if op.op_type not in FOLDABLE or op.domain or depth > _MAX_DEPTH or not _small(v):
        return f"'{v.name}' depends on tensor data (computed by {op.op_type})"
    for x in op.inputs:
        if x is not None:
            reason = host_reason(x, depth + 1, largest)
            if reason is not None:
                return reason
    return None


# Inputs the kernels of an op need on the host although they decide no shape: CumSum's axis picks
# the kernel's strides, a Loop's trip count the recorded iterations.
LAUNCH_INPUTS = {"CumSum": {1: "axis"}, "CumProd": {1: "axis"}, "Loop": {0: "M"}}


def host_input_names(op_type: str) -> dict[int, str]:
    """Index → ONNX name of the inputs of ``op_type`` (default domain) that a GPU delegate reads
    on the host when it specializes: those deciding its output shape, and ``LAUNCH_INPUTS``."""
    positions = SHAPE_FROM_VALUES.get(op_type, ())
    schema = lookup("", op_type) if positions else None
    names = {i: schema.inputs[min(i, len(schema.inputs) - 1)].name for i in positions} if schema else {}
    return {**names, **LAUNCH_INPUTS.get(op_type, {})}


def check_host_inputs(op: Operation):
    """A refusal (``Support``) when one of the inputs of ``op`` that ``host_input_names`` lists is
    not known on the host at specialization; None when all are (or are absent)."""
    from ..backend import Support

    for i, name in host_input_names(op.op_type).items():
        v = op.inputs[i] if i < len(op.inputs) else None
        if v is None:
            continue
        reason = host_reason(v)
        if reason is not None:
            return Support(False, f"{op.op_type} '{name}' is data-dependent: {reason}")
    return None


def host_inputs(body) -> list[Value]:
    """The partition inputs of ``body`` that the runtime reads on the host: the small ones from
    which an input of ``host_input_names`` is computed."""
    inputs = {id(v) for v in body.inputs}
    found: dict[int, Value] = {}

    def walk(v: Value, depth: int) -> None:
        if v is None or v.is_constant or depth > _MAX_DEPTH:
            return
        if id(v) in inputs:
            found[id(v)] = v
            return
        op = v.producer
        if op is not None and op.op_type in FOLDABLE and op.op_type not in ("Shape", "Size"):
            for x in op.inputs:
                walk(x, depth + 1)

    for op in body.walk():  # ops in branches and loop bodies too
        for i in host_input_names(op.op_type) if op.domain == "" else ():
            if i < len(op.inputs):
                walk(op.inputs[i], 0)
        if op.op_type == "If" and op.domain == "" and host_reason(op.inputs[0], largest=1) is None:
            walk(op.inputs[0], 0)  # read on the host, the If records only the branch it takes
    return [v for v in body.inputs if id(v) in found and _small(v)]
