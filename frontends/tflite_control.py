"""TFLite control flow between subgraphs: WHILE (and STABLEHLO_WHILE) → ONNX Loop, IF → ONNX If.

TFLite's WHILE passes its inputs (all of its loop variables, loop invariants included) to a
condition subgraph and, while that returns true, through a body subgraph that returns the next
values; its outputs are the last values. ONNX's Loop tests its condition after each step, so the
translation is:

1. the condition subgraph on the initial values, inlined before the loop: the Loop's first
   condition;
2. a body block (iteration, condition in, loop variables) holding the body subgraph, then the
   condition subgraph on its results: the body's condition out.

A loop that counts gets a trip count instead (the Core ML importer does the same; the GPU
backends can plan a counted Loop, not a data-dependent one): its condition is ``LESS(v_k, b_k)``
or a LOGICAL_AND of several, where each ``v_k`` is an integer loop variable the body steps by
``ADD(v_k, 1)`` and each bound ``b_k`` is a constant or a loop variable the body passes through
unchanged. It runs ``max(min_k(b_k - v_k), 0)`` times, and the condition is not computed.
tf.while_loop over a counter and Keras's recurrent layers (two counters, time and iterations,
against constants) take this form.

STABLEHLO_WHILE has WHILE's meaning (operands as loop variables, a condition subgraph returning a
boolean, a body subgraph returning the next values) with its options in the operator's second
options union; it is translated the same way.

IF passes its inputs after the condition to either branch subgraph; ONNX If branches take no
inputs and read the outer values, so each branch subgraph is translated into its branch block
with its inputs bound to those values.

Subgraphs are translated by ``_Importer.subgraph``, which refuses a cycle of calls and a chain
deeper than ``MAX_CALL_DEPTH``.
"""

from __future__ import annotations

import numpy as np

from offload.ir import Block, DataType, TensorType, Value
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import Node, rule
from .tflite_reader import Table

_COUNTER_TYPES = (TflType.INT32, TflType.INT64)


def _nested(node: Node, name: str, sg: int, inputs: list, extra=None) -> Block:
    """A block holding subgraph ``sg`` on ``inputs`` (then ``extra(results)``'s values)."""

    def build() -> list:
        results = [v for _, v in node.imp.subgraph(sg, inputs)]
        return results if extra is None else extra(results)

    return in_block(node, name, build)


def in_block(node: Node, name: str, build) -> Block:
    """A new block holding the ops ``build()`` adds, its outputs the values it returns."""
    imp = node.imp
    outer, real = imp.block, dict(imp.real)
    block = imp.block = Block(name=imp.namer.fresh(name))
    try:
        block.outputs = [_own_output(node, block, v) for v in build()]
    finally:
        imp.block, imp.real = outer, real
    return block


def _own_output(node: Node, block: Block, v: Value) -> Value:
    """``v`` as an output of ``block``: an Identity when it is not an op of the block or is
    already an output."""
    if v.producer is not None and v.producer.block is block and v not in block.outputs:
        return v
    return node.one("Identity", [v])


def _scalar_bool(node: Node, results: list) -> Value:
    if len(results) != 1:
        raise node.fail(f"its condition subgraph returns {len(results)} values, not one")
    return node.one("Reshape", [results[0], node.ints([])])


@rule("IF", version=1)
def if_(node: Node) -> list:
    then_sg, else_sg = int(node.opt("then_subgraph_index")), int(node.opt("else_subgraph_index"))
    args = node.inputs[1:]
    if any(v is None for v in args):
        raise node.fail("an omitted input is passed to its branches")
    branches = [
        _nested(node, f"if_{node.index}_{label}", sg, args)
        for label, sg in (("then", then_sg), ("else", else_sg))
    ]
    for label, b in zip(("then", "else"), branches):
        if len(b.outputs) != len(node.outputs):
            raise node.fail(
                f"its {label} subgraph returns {len(b.outputs)} values for {len(node.outputs)} outputs"
            )
    cond = node.one("Reshape", [node.inputs[0], node.ints([])])
    return node.op("If", [cond], {"then_branch": branches[0], "else_branch": branches[1]}, len(node.outputs))


def _loop_subgraphs(node: Node) -> tuple[int, int]:
    """(condition, body) subgraph indices: WHILE's options, or STABLEHLO_WHILE's (which sit in
    the operator's second options union, the same two fields)."""
    options = node.options
    if node.name == "STABLEHLO_WHILE":
        kind, options = node.operator.get("builtin_options_2")
        if kind != "StablehloWhileOptions":
            raise node.fail(f"has options {kind}, not StablehloWhileOptions")
    if options is None or "cond_subgraph_index" not in options.fields:
        raise node.fail("has no loop options (condition and body subgraphs)")
    return int(options.get("cond_subgraph_index")), int(options.get("body_subgraph_index"))


@rule("WHILE", "STABLEHLO_WHILE", version=1)
def while_(node: Node) -> list:
    imp = node.imp
    cond_sg, body_sg = _loop_subgraphs(node)
    init = list(node.inputs)
    if any(v is None for v in init):
        raise node.fail("an omitted loop variable")
    if len(init) != len(node.outputs):
        raise node.fail(f"{len(init)} loop variables but {len(node.outputs)} outputs")
    subgraphs = imp.model.get("subgraphs")
    for sg in (cond_sg, body_sg):
        if not 0 <= sg < len(subgraphs):
            raise node.fail(f"subgraph {sg} is outside the model's {len(subgraphs)} subgraphs")
    counted = _counted(node, subgraphs[cond_sg], subgraphs[body_sg], len(init))
    if counted is None:
        trips = None
        c0 = _scalar_bool(node, [v for _, v in imp.subgraph(cond_sg, init)])
    else:
        trips = _trip_count(node, counted, init)
        c0 = imp.const(np.array(True))

    body_graph = subgraphs[body_sg]
    tensors = body_graph.get("tensors")
    listed = body_graph.items("inputs")
    if len(listed) != len(init) or tensors is None:
        raise node.fail(f"its body subgraph takes {len(listed)} values for {len(init)} loop variables")
    carried = []
    for k, i in enumerate(map(int, listed)):
        if not 0 <= i < len(tensors):
            raise node.fail(
                f"body subgraph input {k}: tensor index {i} is outside its {len(tensors)} tensors"
            )
        t = tensors[i]
        ttype = imp.tensor_type(t, f"subgraphs[{body_sg}].tensors[{i}]")
        carried.append(Value(imp.namer.fresh(f"{t.get('name') or 'loop_var'}_in"), ttype))
    it = Value(imp.namer.fresh("iteration"), TensorType(DataType.INT64, ()))
    cin = Value(imp.namer.fresh("cond_in"), TensorType(DataType.BOOL, ()))

    def then_condition(step: list) -> list:
        if len(step) != len(init):
            raise node.fail(f"its body returns {len(step)} values for {len(init)} loop variables")
        if trips is None:
            c1 = _scalar_bool(node, [v for _, v in imp.subgraph(cond_sg, step)])
        else:
            c1 = node.one("Identity", [imp.const(np.array(True))])
        return [c1, *step]

    body = _nested(node, f"while_{node.index}_body", body_sg, carried, then_condition)
    body.inputs = [it, cin, *carried]
    return node.op("Loop", [trips, c0, *init], {"body": body}, len(init))


def _counted(node: Node, cond: Table, body: Table, n: int) -> list | None:
    """[(k, bound)] when the loop counts (module docstring): bound is ("const", int) or
    ("var", j) for a loop variable the body passes through; None otherwise."""
    imp = node.imp
    ctensors, btensors = cond.get("tensors"), body.get("tensors")
    if ctensors is None or btensors is None:
        return None
    cin, bin_, bout = (
        list(map(int, g.items(f))) for g, f in ((cond, "inputs"), (body, "inputs"), (body, "outputs"))
    )
    couts = list(map(int, cond.items("outputs")))
    if not (len(cin) == len(bin_) == len(bout) == n) or len(couts) != 1:
        return None
    producers: dict[int, tuple[str, list, Table]] = {}
    for op in cond.items("operators"):
        code = op.get("opcode_index")
        if code >= len(imp.codes):
            return None
        name = imp.codes[code][0]
        outs = list(map(int, op.items("outputs")))
        if name not in ("LESS", "LOGICAL_AND") or len(outs) != 1:
            return None
        producers[outs[0]] = (name, list(map(int, op.items("inputs"))), op)
    terms: list[list] = []
    pending, seen = [couts[0]], set()
    while pending:
        t = pending.pop()
        if t in seen or t not in producers:
            return None
        seen.add(t)
        name, ins, _ = producers[t]
        if len(ins) != 2:
            return None
        if name == "LOGICAL_AND":
            pending.extend(ins)
        else:
            terms.append(ins)
    if len(seen) != len(producers):
        return None  # an op the condition does not use
    steps = {}
    for op in body.items("operators"):
        code = op.get("opcode_index")
        outs = list(map(int, op.items("outputs")))
        if code < len(imp.codes) and imp.codes[code][0] == "ADD" and len(outs) == 1:
            steps[outs[0]] = (list(map(int, op.items("inputs"))), op)
    counted = []
    for a, b in terms:
        if a not in cin:
            return None
        k = cin.index(a)
        if not 0 <= a < len(ctensors) or ctensors[a].get("type") not in _COUNTER_TYPES:
            return None
        if any(int(d) != 1 for d in ctensors[a].items("shape")):
            return None  # a counter is one number
        if b in cin:
            j = cin.index(b)
            if bout[j] != bin_[j]:
                return None  # the bound changes in the loop
            bound = ("var", j)
        else:
            value = _int_scalar(imp, ctensors, b)
            if value is None:
                return None
            bound = ("const", value)
        step = steps.get(bout[k])
        if step is None or bin_[k] not in step[0]:
            return None
        ins, op = step
        _, options = op.get("builtin_options")
        if len(ins) != 2 or (options is not None and options.get("fused_activation_function") != 0):
            return None
        one = ins[1] if ins[0] == bin_[k] else ins[0]
        if _int_scalar(imp, btensors, one) != 1:
            return None
        counted.append((k, bound))
    return counted


def _int_scalar(imp, tensors, i: int) -> int | None:
    """Tensor ``i``'s value when it is a one-element integer constant."""
    if not 0 <= i < len(tensors):
        return None
    t = tensors[i]
    if t.get("type") not in _COUNTER_TYPES:
        return None
    data = imp.buffer_data(t.get("buffer"), f"tensor {i}")
    dtype = np.dtype("<i4" if t.get("type") == TflType.INT32 else "<i8")
    if data is None or len(data) != dtype.itemsize:
        return None
    return int(np.frombuffer(data, dtype)[0])


def _trip_count(node: Node, counted: list, init: list) -> Value:
    """max(min_k(bound_k - v_k), 0) as an int64 scalar, computed before the loop."""
    remaining = None
    for k, (kind, b) in counted:
        start = node.one("Cast", [node.one("Reshape", [init[k], node.ints([])])], {"to": int(DataType.INT64)})
        if kind == "const":
            stop = node.ints(b)
        else:
            stop = node.one(
                "Cast", [node.one("Reshape", [init[b], node.ints([])])], {"to": int(DataType.INT64)}
            )
        r = node.one("Sub", [stop, start])
        remaining = r if remaining is None else node.one("Min", [remaining, r])
    return node.one("Max", [remaining, node.ints(0)])
