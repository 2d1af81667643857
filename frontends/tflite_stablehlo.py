"""TFLite's StableHLO operators that LiteRT runs and that call subgraphs or move elements:
STABLEHLO_COMPOSITE, CASE, GATHER, SCATTER, REDUCE_WINDOW and SHIFT_LEFT, in ONNX ops.

1. COMPOSITE (``odml.rms_norm``, ``aten.avg_pool2d`` …) runs its decomposition subgraph on its
   inputs, as LiteRT does: the subgraph is inlined at the operator, its inputs bound to the
   operator's inputs and its outputs giving the operator's outputs. The composite's name and
   attributes do not change what it computes and are not kept.
2. CASE runs branch ``index`` (the last one for an index outside [0, n)) on the operands after
   the index: a chain of ONNX Ifs, ``index == k`` picking branch k, the last branch in the last
   else.
3. GATHER that takes whole slices along one axis (``x[i]``, an embedding lookup) is ONNX's
   Gather on the index clamped to the axis. Any other: every output element's operand index is
   built in the graph — the start index vector
   of its batch position placed on the operand dims ``start_index_map`` names and clamped so the
   slice fits (StableHLO's rule), plus the element's offset in the slice — and read with
   GatherND; the collapsed slice dims are then dropped and the offset dims moved to
   ``offset_dims``.
4. SCATTER builds each update element's operand index the same way (no clamping) and writes
   it with ScatterElements into the flattened operand, the update computation subgraph's one
   operator as the reduction (STABLEHLO_ADD → add, MULTIPLY → mul, MAXIMUM → max, MINIMUM → min;
   returning its second argument → none). An index outside the operand is sent to one spare element past
   its end and dropped, so such an update is skipped.
5. REDUCE_WINDOW: the operand dilated and padded with the init value, then, for each position
   of the window, one strided Slice; the body subgraph's one operator combines them, starting
   from the init value. The builtin REDUCE_WINDOW (no base dilations, no padding, its window
   given by constant inputs and its function by ReduceWindowOptions) is the same translation.
6. SHIFT_LEFT: BitShift LEFT. A shift outside [0, bits) gives 0, StableHLO's definition; LiteRT
   shifts by C's ``<<`` there, which is undefined (x86 takes the count modulo 32).

Subgraph indices are checked against the file and against the chain of subgraphs being
translated, so that a decomposition calling itself back is a ModelFormatError naming the
operator (``_Importer.subgraph`` bounds the depth and the total work).
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .tflite_array_ops import _dilated
from .tflite_control import in_block
from .tflite_node import Node, _out_dtype, rule

MAX_WINDOW_POSITIONS = 1024  # REDUCE_WINDOW is one Slice per position of its window

# A reducing subgraph's one operator, as the ONNX op that combines two values and the
# ScatterElements reduction of the same meaning (LiteRT refuses any other, TFLite's ADD included)
_REDUCERS = {
    "STABLEHLO_ADD": ("Add", "add"),
    "STABLEHLO_MULTIPLY": ("Mul", "mul"),
    "STABLEHLO_MAXIMUM": ("Max", "max"),
    "STABLEHLO_MINIMUM": ("Min", "min"),
}


def options_2(node: Node, table: str):
    """The operator's options in the second options union, which must be a ``table``."""
    kind, options = node.operator.get("builtin_options_2")
    if kind != table or options is None:
        raise node.fail(f"has options {kind}, not {table}")
    return options


def callable_subgraph(node: Node, sg: int, what: str) -> int:
    """``sg`` when it is a subgraph of the file that is not already being translated (which
    would make the operator call itself)."""
    imp = node.imp
    count = len(imp.model.get("subgraphs"))
    if not 0 <= sg < count:
        raise node.fail(f"its {what} subgraph {sg} is outside the model's {count} subgraphs")
    if sg in imp.calling:
        chain = " → ".join(str(k) for k in [*imp.calling, sg])
        raise node.fail(f"its {what} subgraph {sg} calls back into itself (subgraphs {chain})")
    return sg


def _inline(node: Node, sg: int, args: list) -> list:
    """Subgraph ``sg`` translated here on ``args``; an output that is an argument, a constant or
    another output again becomes an Identity, so that naming it names nothing else."""
    results, seen = [], []
    for _, v in node.imp.subgraph(sg, list(args)):
        if v.producer is None or any(v is u for u in (*args, *seen)):
            v = node.one("Identity", [v])
        seen.append(v)
        results.append(v)
    return results


@rule("STABLEHLO_COMPOSITE", version=1, inputs=0)
def composite(node: Node) -> list:
    options = options_2(node, "StableHLOCompositeOptions")
    sg = callable_subgraph(node, int(options.get("decomposition_subgraph_index")), "decomposition")
    if any(v is None for v in node.inputs):
        raise node.fail("an omitted input is passed to its decomposition")
    return _inline(node, sg, node.inputs)


@rule("STABLEHLO_CASE", version=1)
def case(node: Node) -> list:
    options = options_2(node, "StablehloCaseOptions")
    branches = [callable_subgraph(node, int(sg), "branch") for sg in options.items("branch_subgraph_indices")]
    args = node.inputs[1:]
    if not branches:
        raise node.fail("has no branches")
    if any(v is None for v in args):
        raise node.fail("an omitted input is passed to its branches")
    index = node.one(
        "Cast", [node.one("Reshape", [node.inputs[0], node.ints([])])], {"to": int(DataType.INT64)}
    )

    def chain(k: int) -> list:
        if k == len(branches) - 1:
            return _inline(node, branches[k], args)
        then = in_block(node, f"case_{node.index}_{k}", lambda: _inline(node, branches[k], args))
        other = in_block(node, f"case_{node.index}_not_{k}", lambda: chain(k + 1))
        for label, b in ((k, then), (f"after {k}", other)):
            if len(b.outputs) != len(node.outputs):
                raise node.fail(
                    f"branch {label} returns {len(b.outputs)} values for {len(node.outputs)} outputs"
                )
        picked = node.one("Equal", [index, node.ints(k)])
        return node.op("If", [picked], {"then_branch": then, "else_branch": other}, len(node.outputs))

    return chain(0)


@rule("STABLEHLO_SHIFT_LEFT", version=1, inputs=2)
def shift_left(node: Node) -> list:
    return node.op("BitShift", node.inputs[:2], {"direction": "LEFT"})


# ---------------------------------------------------------------------------------------------
# GATHER and SCATTER: an operand index per element, built in the graph.


def _static(node: Node, i: int) -> list[int]:
    """Input ``i``'s dimensions, all known: the index constants built here depend on them."""
    dims = list(node.dims(i))
    if not all(isinstance(d, int) for d in dims):
        raise node.unsupported(f"input {i} has dimensions {dims} known only at run time")
    return dims


def _ints_options(options, *fields: str) -> list[list[int]]:
    """The vector ``fields`` of ``options``, as lists of ints (empty where absent)."""
    return [[int(v) for v in options.items(f)] for f in fields]


def _index_vectors(node: Node, i: int, index_vector_dim: int) -> tuple[Value, list[int], int]:
    """Input ``i`` (the start indices) as int64 [batch..., K], its batch shape and K."""
    shape = _static(node, i)
    if index_vector_dim == len(shape):
        shape.append(1)
        x = node.one("Unsqueeze", [node.inputs[i], node.ints([len(shape) - 1])])
    elif 0 <= index_vector_dim < len(shape):
        perm = [d for d in range(len(shape)) if d != index_vector_dim] + [index_vector_dim]
        shape = [shape[d] for d in perm]
        x = node.one("Transpose", [node.inputs[i]], {"perm": perm})
    else:
        raise node.fail(f"index_vector_dim {index_vector_dim} is outside the indices' rank {len(shape)}")
    return node.one("Cast", [x], {"to": int(DataType.INT64)}), shape[:-1], shape[-1]


def _placed(node: Node, vectors: Value, k: int, dims_map: list[int], rank: int) -> Value:
    """[batch..., rank]: each index vector's k components on the operand dims ``dims_map``
    names, zeros on the others."""
    if len(dims_map) != k or len(set(dims_map)) != k or not all(0 <= d < rank for d in dims_map):
        raise node.fail(f"index dims {dims_map} do not name {k} distinct dims of a rank-{rank} operand")
    zero = node.one(
        "Mul", [node.one("Slice", [vectors, node.ints([0]), node.ints([1]), node.ints([-1])]), node.ints(0)]
    )
    extended = node.one("Concat", [vectors, zero], {"axis": -1})
    columns = [dims_map.index(d) if d in dims_map else k for d in range(rank)]
    return node.one("Gather", [extended, node.ints(columns)], {"axis": -1})


def _taken_axis(operand, collapsed, start_map, sizes, offset_dims, nb) -> int | None:
    """The axis when a gather takes whole slices along one axis, its batch dims where that axis
    was (ONNX Gather's layout); None otherwise."""
    if len(start_map) != 1 or collapsed != start_map:
        return None
    axis, rank = start_map[0], len(operand)
    if sizes[axis] != 1 or any(sizes[d] != operand[d] for d in range(rank) if d != axis):
        return None
    if offset_dims != [*range(axis), *range(axis + nb, rank - 1 + nb)]:
        return None
    return axis


@rule("STABLEHLO_GATHER", version=1, inputs=2)
def gather(node: Node) -> list:
    o = options_2(node, "StablehloGatherOptions")
    offset_dims, collapsed, start_map, sizes = _ints_options(
        o, "offset_dims", "collapsed_slice_dims", "start_index_map", "slice_sizes"
    )
    operand = _static(node, 0)
    rank = len(operand)
    vectors, batch, k = _index_vectors(node, 1, int(o.get("index_vector_dim")))
    if (
        len(sizes) != rank
        or any(not 0 <= s <= d for s, d in zip(sizes, operand))
        or any(not 0 <= c < rank or sizes[c] > 1 for c in collapsed)
        or len(offset_dims) != rank - len(collapsed)
        or sorted(offset_dims) != offset_dims
    ):
        raise node.fail(
            f"slice sizes {sizes}, collapsed dims {collapsed} and offset dims {offset_dims} "
            f"do not fit an operand of shape {operand}"
        )
    nb = len(batch)
    axis = _taken_axis(operand, collapsed, start_map, sizes, offset_dims, nb)
    if axis is not None:  # x.take(i, axis): ONNX's Gather, the index clamped as StableHLO clamps it
        index = node.one("Reshape", [vectors, node.ints(batch)])
        index = node.one("Max", [node.one("Min", [index, node.ints(operand[axis] - 1)]), node.ints(0)])
        return node.op("Gather", [node.inputs[0], index], {"axis": axis})
    start = _placed(node, vectors, k, start_map, rank)
    start = node.one(
        "Max",
        [
            node.one("Min", [start, node.ints(np.subtract(operand, sizes))]),
            node.ints(np.zeros(rank, np.int64)),
        ],
    )
    start = node.one("Reshape", [start, node.ints([*batch, *[1] * rank, rank])])
    grid = np.zeros((*sizes, rank), np.int64)
    for d in range(rank):
        grid[..., d] = np.arange(sizes[d]).reshape([sizes[d] if j == d else 1 for j in range(rank)])
    where = node.one("Add", [start, node.imp.const(grid.reshape((*[1] * nb, *sizes, rank)))])
    picked = node.one("GatherND", [node.inputs[0], where], {"batch_dims": 0})
    kept = [sizes[d] for d in range(rank) if d not in collapsed]
    picked = node.one("Reshape", [picked, node.ints([*batch, *kept])])
    out_rank = nb + len(kept)
    perm, b = [], 0
    for axis in range(out_rank):
        if axis in offset_dims:
            perm.append(nb + offset_dims.index(axis))
        else:
            perm.append(b)
            b += 1
    if perm == list(range(out_rank)):
        return [picked]
    return node.op("Transpose", [picked], {"perm": perm})


def _reducer(node: Node, sg: int, what: str) -> str | None:
    """The ONNX op of a subgraph (a, b) → f(a, b) of one operator, or None for (a, b) → b."""
    imp = node.imp
    graph = imp.model.get("subgraphs")[callable_subgraph(node, sg, what)]
    ins, outs = list(map(int, graph.items("inputs"))), list(map(int, graph.items("outputs")))
    ops = list(graph.items("operators"))
    if len(ins) != 2 or len(outs) != 1:
        raise node.unsupported(f"its {what} subgraph {sg} takes {len(ins)} values and returns {len(outs)}")
    if not ops and outs[0] == ins[1]:
        return None
    if len(ops) == 1:
        code = ops[0].get("opcode_index")
        name = imp.codes[code][0] if code < len(imp.codes) else None
        args = sorted(map(int, ops[0].items("inputs")))
        if name in _REDUCERS and args == sorted(ins) and list(map(int, ops[0].items("outputs"))) == outs:
            return name
    raise node.unsupported(
        f"its {what} subgraph {sg} is not one STABLEHLO_ADD, MULTIPLY, MAXIMUM or MINIMUM of its two inputs"
    )


@rule("STABLEHLO_SCATTER", version=1, inputs=3)
def scatter(node: Node) -> list:
    o = options_2(node, "StablehloScatterOptions")
    window_dims, inserted, to_operand = _ints_options(
        o, "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims"
    )
    reducer = _reducer(node, int(o.get("update_computation_subgraph_index")), "update computation")
    operand, updates = _static(node, 0), _static(node, 2)
    rank = len(operand)
    vectors, batch, k = _index_vectors(node, 1, int(o.get("index_vector_dim")))
    window_operand = [d for d in range(rank) if d not in inserted]
    scatter_axes = [a for a in range(len(updates)) if a not in window_dims]
    if (
        len(window_operand) != len(window_dims)
        or len(scatter_axes) != len(batch)
        or [updates[a] for a in scatter_axes] != batch
        or any(not 0 <= a < len(updates) for a in window_dims)
        or any(updates[a] > operand[d] for a, d in zip(window_dims, window_operand))
    ):
        raise node.fail(
            f"updates of shape {updates} with window dims {window_dims} and inserted dims "
            f"{inserted} do not fit an operand of shape {operand} and indices of batch shape {batch}"
        )
    start = _placed(node, vectors, k, to_operand, rank)
    lifted = [1 if a in window_dims else d for a, d in enumerate(updates)]
    start = node.one("Reshape", [start, node.ints([*lifted, rank])])
    grid = np.zeros((*[updates[a] if a in window_dims else 1 for a in range(len(updates))], rank), np.int64)
    for a, d in zip(window_dims, window_operand):
        grid[..., d] += np.arange(updates[a]).reshape(
            [updates[a] if j == a else 1 for j in range(len(updates))]
        )
    where = node.one("Add", [start, node.imp.const(grid)])
    inside = node.one(
        "And",
        [node.one("GreaterOrEqual", [where, node.ints(0)]), node.one("Less", [where, node.ints(operand)])],
    )
    inside = node.one(
        "ReduceMin",
        [node.one("Cast", [inside], {"to": int(DataType.INT64)}), node.ints([-1])],
        {"keepdims": 0},
    )
    size = int(np.prod(operand, dtype=np.int64))
    strides = np.cumprod([1, *operand[::-1]])[:-1][::-1].astype(np.int64) if rank else np.zeros(0, np.int64)
    flat = node.one(
        "ReduceSum", [node.one("Mul", [where, node.ints(strides)]), node.ints([-1])], {"keepdims": 0}
    )
    flat = node.one("Where", [node.one("Cast", [inside], {"to": int(DataType.BOOL)}), flat, node.ints(size)])
    data = node.one("Reshape", [node.inputs[0], node.ints([-1])])
    if not size:
        raise node.fail(f"scatters into an operand of shape {operand}, which has no elements")
    spare = node.one("Slice", [data, node.ints([0]), node.ints([1])])
    data = node.one("Concat", [data, spare], {"axis": 0})
    reduction = "none" if reducer is None else _REDUCERS[reducer][1]
    out = node.one(
        "ScatterElements",
        [
            data,
            node.one("Reshape", [flat, node.ints([-1])]),
            node.one("Reshape", [node.inputs[2], node.ints([-1])]),
        ],
        {"axis": 0, "reduction": reduction},
    )
    out = node.one("Slice", [out, node.ints([0]), node.ints([size])])
    return node.op("Reshape", [out, node.ints(operand)])


# ---------------------------------------------------------------------------------------------
# REDUCE_WINDOW


@rule("STABLEHLO_REDUCE_WINDOW", version=1, inputs=2)
def reduce_window(node: Node) -> list:
    o = options_2(node, "StablehloReduceWindowOptions")
    if len(node.inputs) != 2 or len(node.outputs) != 1:
        raise node.unsupported(
            f"{len(node.inputs) // 2} operands: only one operand with its init value is supported"
        )
    rank = len(_static(node, 0))

    def field(name: str, default: int) -> list[int]:
        (values,) = _ints_options(o, name)
        return values if values else [default] * (2 * rank if name == "padding" else rank)

    body = _reducer(node, int(o.get("body_subgraph_index")), "body")
    if body is None:
        raise node.unsupported("its body returns its second input, which is no reduction")
    window, strides = field("window_dimensions", 1), field("window_strides", 1)
    dilations = field("base_dilations", 1), field("window_dilations", 1)
    return [
        windowed(node, node.inputs[0], _REDUCERS[body][0], window, strides, dilations, field("padding", 0))
    ]


# REDUCE_WINDOW (the builtin): its ReduceWindowFunction as the ONNX op that combines two values;
# ALL and ANY of numbers combine their truth (v != 0), given back as 0 or 1 of the operand's type
_WINDOW_FUNCTIONS = {1: "Add", 2: "Mul", 3: "Min", 4: "Max", 5: "And", 6: "Or"}


@rule("REDUCE_WINDOW", version=1, inputs=5)
def builtin_reduce_window(node: Node) -> list:
    """The operand, its init value, then constant int64 window dimensions, strides and window
    dilations: STABLEHLO_REDUCE_WINDOW without base dilations or padding."""
    function = int(options_2(node, "ReduceWindowOptions").get("reduce_function"))
    if function not in _WINDOW_FUNCTIONS:
        raise node.unsupported(
            f"reduce_function {function} (ADD, MUL, MINIMUM, MAXIMUM, ALL or ANY expected)"
        )
    combine = _WINDOW_FUNCTIONS[function]
    window, strides, dilation = ([int(v) for v in node.const(i).reshape(-1)] for i in (2, 3, 4))
    rank = len(_static(node, 0))
    x, init = node.inputs[0], node.one("Reshape", [node.inputs[1], node.ints([])])
    dtype = _out_dtype(node)
    logical = combine in ("And", "Or") and dtype != DataType.BOOL
    if logical:
        x, init = (node.one("Cast", [v], {"to": int(DataType.BOOL)}) for v in (x, init))
    y = windowed(node, x, combine, window, strides, ([1] * rank, dilation), [0] * (2 * rank), init)
    return [node.one("Cast", [y], {"to": int(dtype)}) if logical else y]


def windowed(node: Node, x: Value, combine: str, window, strides, dilations, padding, init=None) -> Value:
    """``x`` reduced over each window by ``combine`` from ``init`` (else input 1): dilated by
    ``dilations[0]`` and padded with the init value, then one strided Slice per window position
    (``dilations[1]`` apart)."""
    shape = _static(node, 0)
    rank = len(shape)
    base, dilation = dilations
    if (
        not len(window) == len(strides) == len(base) == len(dilation) == rank
        or len(padding) != 2 * rank
        or min([*window, *strides, *base, *dilation, 1]) < 1
        or min(padding, default=0) < 0
    ):
        raise node.fail(
            f"window {window}, strides {strides}, dilations {base}/{dilation} and padding {padding} "
            f"do not fit an operand of shape {shape}"
        )
    positions = int(np.prod(window, dtype=np.int64))
    if positions > MAX_WINDOW_POSITIONS:
        raise node.unsupported(f"a window of {positions} positions (more than {MAX_WINDOW_POSITIONS})")
    if init is None:
        init = node.one("Reshape", [node.inputs[1], node.ints([])])
    x, dims = _dilated(node, x, shape, base, init)
    pads = np.asarray(padding, np.int64).reshape(rank, 2)
    if pads.any():
        x = node.one("Pad", [x, node.ints(np.concatenate([pads[:, 0], pads[:, 1]])), init])
        dims = [d + int(lo + hi) for d, (lo, hi) in zip(dims, pads)]
    spans = [(w - 1) * r + 1 for w, r in zip(window, dilation)]
    out = [(d - s) // st + 1 if d >= s else 0 for d, s, st in zip(dims, spans, strides)]
    if not all(out):
        return node.one("Expand", [init, node.ints(out)])
    result = init
    for offset in np.ndindex(*window):
        starts = [j * r for j, r in zip(offset, dilation)]
        ends = [s + (n - 1) * st + 1 for s, n, st in zip(starts, out, strides)]
        part = node.one(
            "Slice", [x, node.ints(starts), node.ints(ends), node.ints(list(range(rank))), node.ints(strides)]
        )
        result = node.one(combine, [result, part])
    return result
