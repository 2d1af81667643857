"""ONNX's ``ai.onnx.preview.training::Gradient`` expanded at import into ordinary ONNX operators.

``Gradient(xs, zs, y)`` yields dy/dx for each x of ``xs``, for the graph the node sits in: the
importer has already built every operation of that graph that precedes the node, so the
rewrite walks from y's producer back to the xs (reverse mode) and appends, for each operation
on the way, the operators that compute its inputs' adjoints from its output's adjoint.

Why a rewrite and not a CPU kernel: a kernel would see only its inputs (the xs and zs), not the
graph above them, so it would have to carry and re-run a copy of that graph; the expansion
instead is plain Add/Mul/MatMul/ReduceSum/... that every backend already runs, that the passes
optimize, and that the GPU partitioner may take.

Rules:

1. The seed is dy/dy = 1 of y's shape, so for a non-scalar y each output is the gradient of
   sum(y) (the sum of the Jacobian's rows), the convention of the spec's training examples.
2. A value of ``zs`` is held constant: the walk does not go through it. An x the walk never
   reaches gets zeros of its own shape.
3. An x may be an intermediate value (the spec's dY/dH): its adjoint is read where the walk
   reaches it, and the walk goes on through its producer for xs further up.
4. Numpy-style broadcasting of Add, Sub, Mul, Div, Sum and MatMul's batch dims is undone by
   summing the adjoint over the broadcast axes and reshaping to the input's shape: statically
   where both shapes are known at import, else with Shape/Equal/NonZero at run time (the
   ranks must be known).
5. An operator outside ``SUPPORTED`` on the way from the xs to y, an x that is not a float
   tensor, or a y that this graph does not compute before the node is an UnsupportedOpError
   naming it.
"""

from __future__ import annotations

import numpy as np

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import DataType, TensorType, Value

from .onnx_contrib import _Node, contrib

DOMAIN = "ai.onnx.preview.training"
_FLOATS = (DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16)


class _Backward:
    """Builds the adjoint operators of one Gradient node."""

    def __init__(self, n: _Node):
        self.n = n

    def refuse(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.n.where}: {DOMAIN}::Gradient {what}")

    def type(self, v: Value) -> TensorType:
        return self.n.type(v)

    def rank(self, v: Value) -> int:
        return self.n.rank(v)

    def like(self, value: float, v: Value) -> Value:
        return self.n.like(value, v)

    def one(self, op_type: str, inputs, attrs=None) -> Value:
        return self.n.one(op_type, inputs, attrs)

    def filled(self, value: float, v: Value) -> Value:
        """``value`` broadcast to ``v``'s shape, in ``v``'s element type."""
        return self.one("Expand", [self.like(value, v), self.one("Shape", [v])])

    def sum_to(self, g: Value, x: Value) -> Value:
        """``g`` (of the broadcast shape) summed over the axes on which ``x`` was broadcast."""
        tg, tx = self.type(g), self.type(x)
        if tg.is_static and tx.is_static:
            if tg.shape == tx.shape:
                return g
            lead = len(tg.shape) - len(tx.shape)
            axes = list(range(lead)) + [
                lead + i for i, d in enumerate(tx.shape) if d == 1 and tg.shape[lead + i] != 1
            ]
            if axes:
                g = self.one("ReduceSum", [g, self.n.const(axes)], {"keepdims": 1})
            return self.one("Reshape", [g, self.n.const(tx.shape)])
        lead = self.rank(g) - self.rank(x)
        shape = self.one("Shape", [x])
        padded = self.one("Concat", [self.n.const(np.ones(lead)), shape], {"axis": 0}) if lead > 0 else shape
        ones = self.one("Equal", [padded, self.n.const(1)])
        axes = self.one("Reshape", [self.one("NonZero", [ones]), self.n.const([-1])])
        g = self.one("ReduceSum", [g, axes], {"keepdims": 1, "noop_with_empty_axes": 1})
        return self.one("Reshape", [g, shape])

    def swap_last(self, v: Value) -> Value:
        r = self.rank(v)
        return self.one("Transpose", [v], {"perm": [*range(r - 2), r - 1, r - 2]})


def _add(bw: _Backward, op, g):
    return [bw.sum_to(g, x) for x in op.inputs]


def _sub(bw: _Backward, op, g):
    a, b = op.inputs
    return [bw.sum_to(g, a), bw.sum_to(bw.one("Neg", [g]), b)]


def _mul(bw: _Backward, op, g):
    a, b = op.inputs
    return [bw.sum_to(bw.one("Mul", [g, b]), a), bw.sum_to(bw.one("Mul", [g, a]), b)]


def _div(bw: _Backward, op, g):
    a, b = op.inputs
    y = op.outputs[0]
    ga = bw.one("Div", [g, b])  # d(a/b)/da = 1/b
    gb = bw.one("Neg", [bw.one("Div", [bw.one("Mul", [g, y]), b])])  # d(a/b)/db = -(a/b)/b
    return [bw.sum_to(ga, a), bw.sum_to(gb, b)]


def _matmul(bw: _Backward, op, g):
    a, b = op.inputs
    ra, rb = bw.rank(a), bw.rank(b)
    # 1-D operands are matrices with a unit row (a) or column (b), as MatMul's spec promotes them.
    a2 = bw.one("Unsqueeze", [a, bw.n.const([0])]) if ra == 1 else a
    b2 = bw.one("Unsqueeze", [b, bw.n.const([-1])]) if rb == 1 else b
    if ra == 1 and rb == 1:
        g = bw.one("Reshape", [g, bw.n.const([1, 1])])
    elif ra == 1:
        g = bw.one("Unsqueeze", [g, bw.n.const([-2])])
    elif rb == 1:
        g = bw.one("Unsqueeze", [g, bw.n.const([-1])])
    ga = bw.one("MatMul", [g, bw.swap_last(b2)])
    gb = bw.one("MatMul", [bw.swap_last(a2), g])
    if ra == 1:  # drop the unit row again before summing over broadcast batch dims
        ga = bw.one("Squeeze", [ga, bw.n.const([-2])])
    if rb == 1:
        gb = bw.one("Squeeze", [gb, bw.n.const([-1])])
    return [bw.sum_to(ga, a), bw.sum_to(gb, b)]


def _neg(bw: _Backward, op, g):
    return [bw.one("Neg", [g])]


def _identity(bw: _Backward, op, g):
    return [g]


def _relu(bw: _Backward, op, g):
    x = op.inputs[0]
    return [bw.one("Where", [bw.one("Greater", [x, bw.like(0, x)]), g, bw.like(0, g)])]


def _sigmoid(bw: _Backward, op, g):
    y = op.outputs[0]
    return [bw.one("Mul", [g, bw.one("Mul", [y, bw.one("Sub", [bw.like(1, y), y])])])]


def _tanh(bw: _Backward, op, g):
    y = op.outputs[0]
    return [bw.one("Mul", [g, bw.one("Sub", [bw.like(1, y), bw.one("Mul", [y, y])])])]


def _exp(bw: _Backward, op, g):
    return [bw.one("Mul", [g, op.outputs[0]])]


def _log(bw: _Backward, op, g):
    return [bw.one("Div", [g, op.inputs[0]])]


def _sqrt(bw: _Backward, op, g):
    y = op.outputs[0]
    return [bw.one("Div", [g, bw.one("Mul", [bw.like(2, y), y])])]


def _reshape(bw: _Backward, op, g):
    return [bw.one("Reshape", [g, bw.one("Shape", [op.inputs[0]])]), None]


def _transpose(bw: _Backward, op, g):
    perm = op.attributes.get("perm")
    if perm is None:
        perm = list(reversed(range(bw.rank(op.inputs[0]))))
    return [bw.one("Transpose", [g], {"perm": [int(i) for i in np.argsort(perm)]})]


# op type → the adjoints of its inputs (None for an input with no derivative) from the output's.
SUPPORTED = {
    "Add": _add,
    "Sum": _add,
    "Sub": _sub,
    "Mul": _mul,
    "Div": _div,
    "MatMul": _matmul,
    "Neg": _neg,
    "Identity": _identity,
    "Relu": _relu,
    "Sigmoid": _sigmoid,
    "Tanh": _tanh,
    "Exp": _exp,
    "Log": _log,
    "Sqrt": _sqrt,
    "Reshape": _reshape,
    "Transpose": _transpose,
}


def _on_the_way(y: Value, xs: list[Value], zs: list[Value]) -> list:
    """The operations between the xs and y, producers before users; zs stop the walk."""
    stop = {id(z) for z in zs}
    order, state, pending = [], {}, [(y, False)]
    while pending:  # depth-first post-order over producers, without recursion
        v, done = pending.pop()
        op = v.producer
        if op is None or id(v) in stop:
            continue
        if done:
            if state.get(id(op)) != "done":
                state[id(op)] = "done"
                order.append(op)
            continue
        if id(op) in state:
            continue
        state[id(op)] = "open"
        pending.append((v, True))
        pending.extend((x, False) for x in op.inputs if x is not None)
    # Keep only operations that depend on some x: the others have no adjoint to pass on.
    active = {id(x) for x in xs}
    kept = []
    for op in order:
        if any(x is not None and id(x) in active for x in op.inputs):
            kept.append(op)
            active.update(id(o) for o in op.outputs)
    return kept


@contrib("Gradient", domain=DOMAIN)
def _gradient(n: _Node):
    xs_names, zs_names, y_name = n.attr("xs"), n.attr("zs", []), n.attr("y")
    for name, value in (("xs", xs_names), ("zs", zs_names)):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            shown = type(value).__name__
            raise ModelFormatError(
                f"{n.where}: attribute '{name}' of Gradient must be of type strs, not {shown}"
            )
    if not isinstance(y_name, str):
        raise ModelFormatError(
            f"{n.where}: attribute 'y' of Gradient must be of type str, not {type(y_name).__name__}"
        )
    xs_names, zs_names = list(xs_names), list(zs_names)
    if len(n.inputs) != len(xs_names) + len(zs_names):
        raise ModelFormatError(
            f"{n.where}: Gradient has {len(n.inputs)} inputs; its xs and zs name {len(xs_names) + len(zs_names)}"
        )
    xs, zs = n.inputs[: len(xs_names)], n.inputs[len(xs_names) :]
    y = n.b.scope.get(y_name)
    if y is None:
        raise UnsupportedOpError(
            f"{n.where}: {DOMAIN}::Gradient differentiates '{y_name}', which the graph does not compute "
            "before this node: move the node after the one that computes it"
        )
    bw = _Backward(n)
    for x in xs:
        if x is None or bw.type(x).dtype not in _FLOATS:
            raise bw.refuse(
                f"differentiates with respect to '{getattr(x, 'name', '')}', which is not a float tensor"
            )
    adjoint: dict[int, Value] = {id(y): bw.filled(1, y)}

    def accumulate(v: Value, g: Value) -> None:
        adjoint[id(v)] = bw.one("Add", [adjoint[id(v)], g]) if id(v) in adjoint else g

    ops = _on_the_way(y, xs, zs)
    for op in reversed(ops):
        g = adjoint.get(id(op.outputs[0]))
        if g is None:  # no path from this op's output to y
            continue
        rule = SUPPORTED.get(op.op_type) if op.domain == "" and len(op.outputs) == 1 else None
        if rule is None:
            raise bw.refuse(
                f"cannot differentiate through {op.qualified_type} (node '{op.name or op.outputs[0].name}') "
                f"on the way from the xs to '{y_name}': it differentiates {', '.join(sorted(SUPPORTED))}"
            )
        for x, gx in zip(op.inputs, rule(bw, op, g)):
            if x is not None and gx is not None:
                accumulate(x, gx)
    grads, seen = [], set()
    for x in xs:
        g = adjoint[id(x)] if id(x) in adjoint else bw.filled(0, x)
        if id(g) in seen:  # each output is a value of its own (c = a + b gives dc/da = dc/db)
            g = bw.one("Identity", [g])
        seen.add(id(g))
        grads.append(g)
    return grads
