"""Replacing partitions by ``offload::Delegate`` ops: subprogram, preprocess, fallback, rewiring."""

from __future__ import annotations

import json
from collections.abc import Mapping

from offload.delegates.backend import CompileSpec, CompileSpecError
from offload.errors import OffloadError
from offload.ir import Block, Function, Operation, Program, Value
from offload.ir.clone import clone_block, clone_value
from offload.ir.rewrite import Namer, replace_results, top_level_op, toposort

from .partition import Partition, Partitioner

SpecsArg = Mapping[str, list[CompileSpec] | Mapping[str, object]] | None


def normalize_specs(compile_specs: SpecsArg, partitioner: Partitioner) -> dict[str, list[CompileSpec]]:
    """Backend name → list of CompileSpec; a dict of key → value becomes CompileSpec.of each."""
    names = {b.name for b in partitioner.backends}
    out: dict[str, list[CompileSpec]] = {}
    for name, specs in (compile_specs or {}).items():
        if name not in names:
            raise CompileSpecError(
                f"compile specs given for backend '{name}', which is not one of {sorted(names)}"
            )
        if isinstance(specs, Mapping):
            specs = [CompileSpec.of(k, v) for k, v in specs.items()]
        out[name] = list(specs)
    return out


def lower_partitions(program: Program, partitioner: Partitioner, specs: dict[str, list[CompileSpec]]) -> None:
    """Partition ``program`` in place and replace each partition by a Delegate op."""
    shapes = _shapes_of_sets(program, specs)
    report = partitioner.partition(program)
    names = Namer(program)
    touched: dict[int, Function] = {}
    for part in report.partitions:
        _delegate(part, specs.get(part.backend.name, []), names, shapes)
        touched[id(part.fn)] = part.fn
    for fn in touched.values():
        toposort(fn.body)


def _fresh(name: str, names: Namer) -> str:
    """``name`` if free, else ``name.d`` ("the delegate's copy"), else a numbered one."""
    return names.fresh(name if name not in names else f"{name}.d")


SHAPES_KEY = "shapes"


def _shapes_of_sets(program: Program, specs: dict[str, list[CompileSpec]]) -> dict[str, list[dict]]:
    """For each backend's ``shapes`` spec (a JSON list of {graph input name: [dims]}): every value's
    shape in the main function under each set, by value name, found by shape inference."""
    from offload.ir import TensorType, infer_types
    from offload.ir.clone import clone_program

    out: dict[str, list[dict]] = {}
    for backend, given in specs.items():
        spec = next((s for s in given if s.key == SHAPES_KEY), None)
        if spec is None:
            continue
        try:
            sets = json.loads(spec.text())
        except (ValueError, RecursionError):
            sets = None
        if not isinstance(sets, list) or not all(isinstance(x, dict) for x in sets):
            raise CompileSpecError(
                f"backend '{backend}': compile spec 'shapes' must be a JSON list of {{input name: [dims]}}"
            )
        found = []
        for shapes in sets:
            copy = clone_program(program)
            body = copy.main.body
            for v in body.inputs:
                if v.name in shapes and isinstance(v.type, TensorType):
                    v.type = TensorType(v.type.dtype, tuple(int(d) for d in shapes[v.name]), v.type.quant)
            for op in body.walk():
                for v in op.outputs:
                    if isinstance(v.type, TensorType):
                        v.type = TensorType(v.type.dtype, None, v.type.quant)  # inferred anew
            infer_types(copy)
            values = [*body.inputs, *(v for op in body.operations for v in op.outputs)]
            found.append(
                {
                    v.name: list(v.type.shape)
                    for v in values
                    if isinstance(v.type, TensorType) and v.type.is_static
                }
            )
        out[backend] = found
    return out


def _partition_shapes(specs: list[CompileSpec], sets: list[dict], inputs, params) -> list[CompileSpec]:
    """``specs`` with the ``shapes`` spec restated for one partition: each set as the shapes of the
    partition's inputs (by their names inside it); a set that leaves one of them unknown is dropped."""
    if not sets:
        return specs
    mine = [
        {p.name: s[v.name] for v, p in zip(inputs, params)} for s in sets if all(v.name in s for v in inputs)
    ]
    return [CompileSpec.of(SHAPES_KEY, json.dumps(mine)) if s.key == SHAPES_KEY else s for s in specs]


def _delegate(part: Partition, specs: list[CompileSpec], names: Namer, shapes: dict) -> Operation:
    body = part.fn.body
    inputs, weights, outputs = part.inputs(), part.weights(), part.outputs()
    inside = _inside(part)
    # Taken now: once the ops live in the delegate's fallback, "inside" can no longer be told apart.
    outside_uses = [[(u, i) for u, i in v.uses if not _is_inside(u, inside)] for v in outputs]
    fallback = _fallback_block(part, inputs, weights, outputs, names)
    specs = _partition_shapes(specs, shapes.get(part.backend.name, []), inputs, fallback.inputs)
    position = body.operations.index(part.ops[0])
    for moved in part.ops:
        body.operations.remove(moved)
        fallback.append(moved)
    compiler = part.backend
    compiler.check_specs(specs)
    result = compiler.preprocess(_subprogram(fallback, part.fn), specs)
    if not isinstance(getattr(result, "processed", None), (bytes, bytearray)):
        raise OffloadError(f"backend '{compiler.name}': preprocess must return a PreprocessResult with bytes")
    op = Operation(
        "Delegate",
        list(inputs),
        {
            "backend": compiler.name,
            "processed": bytes(result.processed),
            "compile_specs": list(specs),
            "fallback": fallback,
        },
        domain="offload",
        name=_fresh(f"delegate{part.id}", names),
        output_names=[v.name for v in outputs],
    )
    for inner, outer, uses in zip(outputs, op.outputs, outside_uses):
        outer.type = inner.type
        for user, i in uses:
            user.set_input(i, outer)
        # Function results and results of CPU ops' nested blocks that were ``inner``.
        replace_results(inner, outer, body, skip=fallback)
    # The delegate stands where the partition's first op was; toposort fixes the order after.
    body.operations.insert(position, op)
    op.block = body
    return op


def _fallback_block(
    part: Partition, inputs: list[Value], weights: list[Value], outputs: list[Value], names: Namer
) -> Block:
    """The partition as a Block: fresh parameters, its weights, its ops (appended by the caller)."""
    block = Block(f"delegate{part.id}_fallback")
    inside = _inside(part)
    for v in inputs:
        param = clone_value(v, _fresh(v.name, names))
        block.inputs.append(param)
        _rewire_inside(v, param, part)
    body = part.fn.body
    for w in weights:
        if _only_used_inside(w, inside, part.fn):
            # A weight only the partition reads moves with it and keeps its name.
            del body.constants[w.name]
            block.constants[w.name] = w
        else:
            copy = clone_value(w, _fresh(w.name, names))
            block.constants[copy.name] = copy
            _rewire_inside(w, copy, part)
    block.outputs = list(outputs)
    return block


def _inside(part: Partition) -> set[int]:
    return {id(op) for op in part.ops}


def _is_inside(user: Operation, inside: set[int]) -> bool:
    return id(top_level_op(user)) in inside


def _rewire_inside(old: Value, new: Value, part: Partition) -> None:
    inside = _inside(part)
    for user, i in old.uses:
        if _is_inside(user, inside):
            user.set_input(i, new)
    # A nested block of a partition op may also return the outer value as is.
    for op in part.ops:
        for nested in [op, *(o for b in op.blocks for o in b.walk())]:
            for b in nested.blocks:
                b.outputs = [new if v is old else v for v in b.outputs]


def _only_used_inside(v: Value, inside: set[int], fn: Function) -> bool:
    return all(_is_inside(u, inside) for u in v.users) and not any(o is v for o in fn.outputs)


def _subprogram(fallback: Block, fn: Function) -> Program:
    """What the backend compiles: one function "forward", a copy of the fallback block."""
    return Program({"forward": Function("forward", clone_block(fallback), dict(fn.opset_imports))})
