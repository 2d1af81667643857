"""Several models of one nnpackage joined into one program, as its MANIFEST connects them.

The MANIFEST (nnpackage 1.3) names each connection point by a triple ``"model:subgraph:io"``:
the model's position in ``models``, a subgraph of that model, and a position in that subgraph's
inputs or outputs. ``pkg-inputs`` and ``pkg-outputs`` list the package's own inputs and outputs;
``model-connect`` lists edges ``{"from": output triple, "to": [input triples]}``.

With ``pkg-inputs`` / ``pkg-outputs`` the models become one function, ``forward``: its inputs
are the package inputs in their order, every model's operators follow in an order where each
model runs after those whose outputs it reads, and its outputs are the package outputs. Every
input of every model must be fed exactly once, by a package input or by an edge; edges must not
form a cycle; a fed input and the output feeding it must agree in element type and rank. Each
model's own main subgraph (0) is what a triple may name. Without them, each model is a method of
its own: ``forward`` the first (the spec's default model), ``model_1``, ``model_2``, … the others.

Values keep their names where those are unique across the package; a clash gets a fresh name.
Any violation is a ``ModelFormatError`` naming the package and the field.
"""

from __future__ import annotations

import re

from offload.errors import ModelFormatError, UnsupportedOpError
from offload.ir import Block, Function, Namer, Program, Value

TRIPLE = re.compile(r"^(\d{1,6}):(\d{1,6}):(\d{1,6})$")


def _triple(text, where: str, count: int) -> tuple[int, int, int]:
    m = TRIPLE.match(text) if isinstance(text, str) else None
    if m is None:
        raise ModelFormatError(f"{where}: {text!r} is not a 'model:subgraph:io' triple")
    model, subgraph, io = (int(g) for g in m.groups())
    if model >= count:
        raise ModelFormatError(f"{where}: model {model} is outside the package's {count} models")
    if subgraph != 0:
        raise UnsupportedOpError(
            f"{where}: subgraph {subgraph} of model {model} (only main subgraphs, 0, are joined)"
        )
    return model, subgraph, io


def _only_function(program: Program, where: str) -> Function:
    if len(program.functions) != 1:
        raise UnsupportedOpError(
            f"{where}: a model of {len(program.functions)} signatures in a package of several models"
        )
    fn = program.main
    if fn.states:
        raise UnsupportedOpError(
            f"{where}: a model with state (resource variables) in a package of several models"
        )
    return fn


def separate(programs: list[Program], origin: str) -> Program:
    """Each model as a method: ``forward`` (the first), ``model_1``, … (no connections given)."""
    functions = {}
    for k, program in enumerate(programs):
        fn = _only_function(program, f"{origin}: model {k}")
        fn.name = "forward" if k == 0 else f"model_{k}"
        fn.body.name = fn.name
        functions[fn.name] = fn
    return Program(functions, {}, source=origin)


def joined(programs: list[Program], manifest: dict, origin: str) -> Program:
    """One function ``forward`` chaining the models along ``model-connect``."""
    where = f"{origin}: metadata/MANIFEST"
    fns = [_only_function(p, f"{origin}: model {k}") for k, p in enumerate(programs)]
    n = len(fns)

    def listed(field: str) -> list:
        value = manifest.get(field, [])
        if not isinstance(value, list):
            raise ModelFormatError(f"{where}: '{field}' is not a list")
        return value

    def io(triple, field: str, outputs: bool) -> tuple[int, int]:
        model, _, index = _triple(triple, f"{where}: {field}", n)
        ports = fns[model].outputs if outputs else fns[model].inputs
        if index >= len(ports):
            kind = "outputs" if outputs else "inputs"
            raise ModelFormatError(
                f"{where}: {field}: model {model} has {len(ports)} {kind}, not {index + 1}"
            )
        return model, index

    feeds: dict[tuple[int, int], tuple] = {}  # (model, input) → ("package", k) or (model, output)

    def feed(target, source, field: str) -> None:
        if target in feeds:
            raise ModelFormatError(f"{where}: {field}: input {target[1]} of model {target[0]} is fed twice")
        feeds[target] = source

    pkg_inputs = [io(t, f"pkg-inputs[{k}]", False) for k, t in enumerate(listed("pkg-inputs"))]
    for k, target in enumerate(pkg_inputs):
        feed(target, ("package", k), f"pkg-inputs[{k}]")
    for k, edge in enumerate(listed("model-connect")):
        field = f"model-connect[{k}]"
        if not isinstance(edge, dict) or not isinstance(edge.get("to"), list):
            raise ModelFormatError(f"{where}: {field} is not {{'from': triple, 'to': [triples]}}")
        source = io(edge.get("from"), f"{field}.from", True)
        for j, t in enumerate(edge["to"]):
            target = io(t, f"{field}.to[{j}]", False)
            if target[0] == source[0]:
                raise ModelFormatError(f"{where}: {field}: model {source[0]} feeds itself")
            feed(target, source, f"{field}.to[{j}]")
    pkg_outputs = [io(t, f"pkg-outputs[{k}]", True) for k, t in enumerate(listed("pkg-outputs"))]
    if not pkg_outputs:
        raise ModelFormatError(f"{where}: 'pkg-outputs' is empty")
    for m, fn in enumerate(fns):
        for i in range(len(fn.inputs)):
            if (m, i) not in feeds:
                raise ModelFormatError(f"{where}: input {i} of model {m} is fed by nothing")

    order = _topological(n, feeds, where)
    _unique_names(fns, order)
    block = Block(name="forward")
    block.inputs = [fns[m].inputs[i] for m, i in pkg_inputs]
    for m in order:
        body = fns[m].body
        for i, v in enumerate(body.inputs):
            source = feeds[(m, i)]
            if source[0] == "package":
                continue
            out = fns[source[0]].outputs[source[1]]
            _check_fits(out, v, f"{where}: output {source[1]} of model {source[0]} → input {i} of model {m}")
            v.replace_all_uses_with(out)
        block.constants.update(body.constants)
        for op in list(body.operations):
            block.append(op)
    for m, o in pkg_outputs:
        v = fns[m].outputs[o]
        if v in block.outputs or v.producer is None:
            op = block.append(_identity(v, f"{v.name}_{len(block.outputs)}"))
            v = op.outputs[0]
        block.outputs.append(v)
    opsets = {}
    for fn in fns:
        for domain, version in fn.opset_imports.items():
            opsets[domain] = max(version, opsets.get(domain, 0))
    return Program({"forward": Function("forward", block, opsets)}, {}, source=origin)


def _identity(v: Value, name: str):
    from offload.ir import Operation

    op = Operation("Identity", [v], output_names=[name])
    op.outputs[0].type = v.type
    return op


def _topological(n: int, feeds: dict, where: str) -> list[int]:
    """Models in an order where each follows those it reads from; a cycle is refused."""
    after = {m: {s[0] for (t, _), s in feeds.items() if t == m and s[0] != "package"} for m in range(n)}
    order: list[int] = []
    while len(order) < n:
        ready = [m for m in range(n) if m not in order and after[m] <= set(order)]
        if not ready:
            left = sorted(set(range(n)) - set(order))
            raise ModelFormatError(f"{where}: model-connect joins models {left} in a cycle")
        order.append(ready[0])
    return order


def _check_fits(out: Value, param: Value, where: str) -> None:
    a, b = out.type, param.type
    if a is None or b is None:
        return
    if a.dtype != b.dtype or (a.shape is not None and b.shape is not None and len(a.shape) != len(b.shape)):
        raise ModelFormatError(f"{where}: {a} does not fit {b}")


def _unique_names(fns: list[Function], order: list[int]) -> None:
    """Rename values whose names an earlier model (in ``order``) already took."""
    namer = Namer()
    for m in order:
        body = fns[m].body
        blocks = [body, *(b for op in body.walk() for b in op.blocks)]
        for blk in blocks:
            renamed = {}
            for name, v in blk.constants.items():
                v.name = namer.fresh(name) if name in namer else name
                namer.reserve(v.name)
                renamed[v.name] = v
            blk.constants = renamed
            values = [*blk.inputs, *(o for op in blk.operations for o in op.outputs)]
            for v in values:
                if v.name in namer:
                    v.name = namer.fresh(v.name)
                namer.reserve(v.name)
