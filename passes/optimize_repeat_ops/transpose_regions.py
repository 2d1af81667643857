"""optimize_repeat_ops::transpose_regions — a region of layout-free ops between Transposes runs in
the layout on the Transposes' other side.

A TFLite model arrives channels-last (NHWC) and its convolutions and pools are ONNX ops,
channels-first (NCHW): the importer wraps each one in ``Transpose(perm=[0, 3, 1, 2])`` before and
``Transpose(perm=[0, 2, 3, 1])`` after. Between them sit ops for which the layout does not
matter (activations, residual Adds, Pad, Concat), often with several readers (a residual's skip
branch), so the local rule of ``reduce_transposes`` (one chain, one reader each) cancels few of
the pairs.

Rule: a *region* is a connected set of layout-free ops of one block whose values of rank R are
all the transposes ``Transpose(x, q)`` of arrays x in the other layout. It is grown from the
outputs of ``Transpose(q)`` ops (*entries*) across readers and producers that are:

- elementwise ops (unary, with scalar constant extras like Clip's bounds; binary, variadic and
  Where), every operand a region value, a constant (padded to rank R with leading 1s), or a
  value of rank R from outside (a *boundary input*);
- ``Pad`` with constant pads (and no ``axes``), ``Concat`` (its axis renumbered), ``Resize``
  with constant roi, scales and sizes (its ``axes`` renumbered in their order: the kernel
  resamples one axis after the other in that order, so the sums round alike);
- reductions (``REDUCTIONS``) that keep their dims, with constant axes (renumbered): a TFLite
  ``MEAN`` over H and W (a squeeze-and-excitation block's pooling) then reads the channels-first
  array. Max and Min give the same values; the sums add the same terms in the other layout's
  memory order, so a Sum or Mean may differ in its last bits from the transposed one (the
  difference of any reordered float sum), which the tolerances of the runtimes compared against
  cover.

Its edges: ``Transpose(inverse(q))`` readers (*exits*, they become the untransposed value
itself), and *boundary outputs* (a value read by anything else or returned) which get one
``Transpose(q)`` of their own. The region is rewritten when that removes more Transposes than it
adds: entries whose every reader is in the region or an exit, plus exits, against boundary
inputs and outputs. Its ops are rebuilt on the untransposed arrays (constants transposed by q's
inverse, Pad's pads and Concat's axis renumbered), so every element is computed by the same
arithmetic from the same operands: the values are the same, bit for bit.

Before (a residual block as a TFLite file gives it)::

    %a: (1,8,8,4,fp32) = Transpose(data=%c1, perm=[0, 2, 3, 1])     # %c1: (1,4,8,8): a Conv
    %r: (1,8,8,4,fp32) = PRelu(X=%a, slope=%s)                       # %s: (1,1,4,fp32)
    %t: (1,4,8,8,fp32) = Transpose(data=%r, perm=[0, 3, 1, 2])
    %c2: (1,4,8,8,fp32) = Conv(X=%t, …)
    %b: (1,8,8,4,fp32) = Transpose(data=%c2, perm=[0, 2, 3, 1])
    %y: (1,8,8,4,fp32) = Add(A=%r, B=%b)

After::

    %r: (1,4,8,8,fp32) = PRelu(X=%c1, slope=%s_t)                    # %s_t: (1,4,1,1,fp32)
    %c2: (1,4,8,8,fp32) = Conv(X=%r, …)
    %y_t: (1,4,8,8,fp32) = Add(A=%r, B=%c2)
    %y: (1,8,8,4,fp32) = Transpose(data=%y_t, perm=[0, 2, 3, 1])     # a boundary output

Not taken: ops whose result depends on the layout (Reshape, Softmax, MatMul, reductions that drop
dims), a
Pad with ``axes`` or pads computed at run time, operands of another rank that are not
constants, values used in a nested block (they are boundary outputs).
"""

from __future__ import annotations

import numpy as np

from offload.ir import Block, Operation, Program, Value

from ..pattern import Rewriter, const, rank
from ..registry import graph_pass
from .merge_consecutive_transposes import perm_of
from .reduce_transposes import BINARY, UNARY

VARIADIC = frozenset(["Sum", "Mean", "Max", "Min"])
REDUCTIONS = frozenset(
    [
        "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
    ]
)  # fmt: skip


def _reduced_axes(op: Operation) -> list[int] | None:
    """A keepdims reduction's axes as given (attribute, or constant input 1; [] for none), or None
    when they are computed at run time or the reduction drops dims."""
    if not op.attributes.get("keepdims", 1):
        return None
    if len(op.inputs) > 1 and op.inputs[1] is not None:
        axes = const(op.inputs[1])
        return None if axes is None or axes.ndim > 1 else [int(a) for a in axes.reshape(-1)]
    return [int(a) for a in op.attributes.get("axes") or []]


def _inverse(q: list[int]) -> list[int]:
    return [int(i) for i in np.argsort(q)]


_OWN_CONSTANTS = REDUCTIONS | {"Pad", "Resize"}  # constant inputs after the data: not transposed


class _Region:
    """A region grown from one entry: its ops, entries, exits, boundary inputs and outputs."""

    def __init__(self, block: Block, q: list[int], rw: Rewriter):
        self.block, self.q, self.p, self.rw = block, q, _inverse(q), rw
        self.ops: dict[int, Operation] = {}
        self.entries: dict[int, Operation] = {}  # Transpose(q) ops whose outputs are region values
        self.values: dict[int, Value] = {}  # region values (in the transposed layout)
        self.inputs: dict[int, Value] = {}  # boundary inputs: rank-R values from outside

    def _transpose_here(self, op: Operation | None, perm: list[int]) -> bool:
        return (
            op is not None
            and op.op_type == "Transpose"
            and not op.domain
            and op.block is self.block
            and perm_of(op) == perm
        )

    def is_entry(self, op: Operation | None) -> bool:
        return self._transpose_here(op, self.q)

    def is_exit(self, op: Operation) -> bool:
        return self._transpose_here(op, self.p)

    def takes(self, op: Operation) -> bool:
        """Whether ``op`` (reading a region value) can run on the untransposed arrays."""
        R = len(self.q)
        if op.domain or op.block is not self.block or len(op.outputs) != 1 or op.blocks:
            return False
        if rank(op.outputs[0]) != R:
            return False
        kind = op.op_type
        operands: list[Value | None]
        if kind in UNARY:
            operands = op.inputs[:1]
            if any(w is not None and (const(w) is None or const(w).ndim) for w in op.inputs[1:]):
                return False
        elif kind in BINARY or kind in VARIADIC or kind == "Where":
            operands = list(op.inputs)
        elif kind == "Pad":
            pads = const(op.inputs[1]) if len(op.inputs) > 1 else None
            extra = op.inputs[2] if len(op.inputs) > 2 else None
            if pads is None or pads.shape != (2 * R,) or len(op.inputs) > 3:
                return False
            if extra is not None and (const(extra) is None or const(extra).size != 1):
                return False
            operands = op.inputs[:1]
        elif kind == "Concat":
            operands = list(op.inputs)
        elif kind == "Resize":  # roi, scales and sizes constants, one per resized axis (axes' order)
            if any(w is not None and const(w) is None for w in op.inputs[1:]):
                return False
            operands = op.inputs[:1]
        elif kind in REDUCTIONS:
            if len(op.inputs) > 2 or _reduced_axes(op) is None:
                return False
            operands = op.inputs[:1]
        else:
            return False
        for w in operands:
            if w is None:
                return False
            c = const(w)
            if c is not None:
                if c.ndim > R or (kind == "Concat" and c.ndim != R):
                    return False
            elif rank(w) != R:
                return False
        return True

    def grow(self, start: Value) -> None:
        """The region around ``start``, an entry's output: readers and producers that take the
        transposed layout, until none is left."""
        self._add_value(start)
        ops: list[Operation] = []
        values = [start]
        while values or ops:
            while values:
                for user in values.pop().users:
                    if id(user) not in self.ops and not self.is_exit(user) and self.takes(user):
                        self.ops[id(user)] = user
                        ops.append(user)
            while ops:
                op = ops.pop()
                for w in op.inputs:
                    if w is None or const(w) is not None or id(w) in self.values:
                        continue
                    producer = w.producer
                    if self.is_entry(producer):
                        self._add_value(w)
                        values.append(w)
                    elif producer is not None and producer.block is self.block and self.takes(producer):
                        if id(producer) not in self.ops:
                            self.ops[id(producer)] = producer
                            ops.append(producer)
                    else:
                        self.inputs[id(w)] = w
                for out in op.outputs:
                    if id(out) not in self.values:
                        self._add_value(out)
                        values.append(out)

    def _add_value(self, v: Value) -> None:
        self.values[id(v)] = v
        if self.is_entry(v.producer):
            self.entries[id(v.producer)] = v.producer

    def plan(self) -> tuple[list[Operation], list[Operation], list[Value], int]:
        """(exits, removable entries, boundary outputs, Transposes saved) of the grown region."""
        exits, outputs = [], []
        for v in self.values.values():
            own = v.producer is not None and id(v.producer) in self.ops
            outside = False
            for user in v.users:
                if self.is_exit(user):
                    exits.append(user)
                elif id(user) not in self.ops:
                    outside = True
            if own and (outside or self.rw.returned(v)):
                outputs.append(v)
        removable = [
            e
            for e in self.entries.values()
            if not self.rw.returned(e.outputs[0])
            and all(id(u) in self.ops or self.is_exit(u) for u in e.outputs[0].users)
        ]
        saved = len(exits) + len(removable) - len(outputs) - len(self.inputs)
        return exits, removable, outputs, saved

    def rewrite(self, exits: list[Operation], removable: list[Operation], outputs: list[Value]) -> None:
        rw, block, q, p = self.rw, self.block, self.q, self.p
        R = len(q)
        new: dict[int, Value] = {id(e.outputs[0]): e.inputs[0] for e in self.entries.values()}
        order = [op for op in block.operations if id(op) in self.ops]
        for op in order:
            inputs: list[Value | None] = []
            for w in op.inputs:
                c = const(w)
                if w is None or (
                    c is not None
                    and (c.ndim == 0 or (op.op_type in _OWN_CONSTANTS and w is not op.inputs[0]))
                ):
                    inputs.append(w)
                elif c is not None:
                    full = c.reshape((1,) * (R - c.ndim) + c.shape).transpose(p)
                    inputs.append(rw.constant(block, np.ascontiguousarray(full), stem=f"{w.name}_t"))
                elif id(w) in new:
                    inputs.append(new[id(w)])
                else:  # a boundary input, transposed once
                    t = rw.build(block, "Transpose", [w], {"perm": p}, before=op, stem=f"{w.name}_t")
                    new[id(w)] = t.outputs[0]
                    inputs.append(t.outputs[0])
            attrs = dict(op.attributes)
            if op.op_type == "Pad":
                pads = const(op.inputs[1])
                moved = np.empty_like(pads)
                for a in range(R):
                    moved[q[a]], moved[R + q[a]] = pads[a], pads[R + a]
                inputs[1] = rw.constant(block, moved, stem=f"{op.inputs[1].name}_t")
            elif op.op_type == "Concat":
                attrs["axis"] = q[int(attrs.get("axis", 0)) % R]
            elif op.op_type == "Resize":
                # the same axes in the same order (the kernel resizes one after the other in it)
                axes = attrs.get("axes")
                attrs["axes"] = [q[int(a) % R] for a in (range(R) if axes is None else axes)]
            elif op.op_type in REDUCTIONS:
                moved = sorted(q[a % R] for a in _reduced_axes(op))
                if len(op.inputs) > 1 and op.inputs[1] is not None:
                    axes = np.asarray(moved, dtype=np.int64)
                    inputs[1] = rw.constant(block, axes, stem=f"{op.inputs[1].name}_t")
                elif "axes" in attrs:
                    attrs["axes"] = moved
            built = rw.build(block, op.op_type, inputs, attrs, before=op, stem=op.outputs[0].name)
            new[id(op.outputs[0])] = built.outputs[0]
        for x in exits:
            v = x.inputs[0]
            if not rw.substitute(x.outputs[0], new[id(v)], block) and id(v.producer) in self.ops:
                outputs.append(v)  # a function output that cannot take the name: the exit stays
        for v in dict.fromkeys(outputs):
            untransposed = new[id(v)]
            back = rw.build(block, "Transpose", [untransposed], {"perm": q}, after=untransposed.producer)
            rw.substitute(v, back.outputs[0], block)
        rw.drop(*exits)
        rw.drop(*order)
        rw.drop(*removable)


@graph_pass("optimize_repeat_ops::transpose_regions")
def transpose_regions(program: Program) -> bool:
    rw = Rewriter(program)
    changed = False
    kept: set[int] = set()  # entries of regions grown and left as they are: the same region again
    for block, op in rw.ops():
        if not rw.alive(op) or op.op_type != "Transpose" or op.domain or id(op) in kept:
            continue
        q = perm_of(op)
        if q is None or q == sorted(q) or rank(op.outputs[0]) != len(q):
            continue
        region = _Region(block, q, rw)
        region.grow(op.outputs[0])
        if not region.ops:
            continue
        exits, removable, outputs, saved = region.plan()
        if saved > 0:
            region.rewrite(exits, removable, outputs)
            changed = True
        else:
            kept.update(region.entries)
    return changed
