"""TFLite builtin operators that move, pick and scatter elements, as IR ops: unpacking, space ↔
batch, one-hot, coordinates, scatters, segment reductions, diagonals, sequence reversal, dense
from sparse, unique values, buckets, dilation."""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value
from offload.schemas.generated.tflite.TensorType import TensorType as TflType

from .tflite_node import INT64_MAX, Node, _cast_to_output, _int64, _out_dtype, rule

# ---------------------------------------------------------------------------------------------
# Rules: unpacking, space ↔ batch.


@rule("UNPACK", version=4)
def unpack(node: Node) -> list:
    rank = len(node.dims(0))
    axis = int(node.opt("axis"))
    if not -rank <= axis < rank:
        raise node.fail(f"axis {axis} is outside rank {rank}")
    axis %= rank
    n = len(node.outputs)
    if node.opt("num") != n:
        raise node.fail(f"num {node.opt('num')} differs from its {n} outputs")
    parts = (
        node.op("Split", [node.inputs[0]], {"axis": axis, "num_outputs": n}, n) if n > 1 else node.inputs[:1]
    )
    return [node.one("Squeeze", [p, node.ints([axis])]) for p in parts]


def _blocks(node: Node, pairs: int) -> tuple[np.ndarray, np.ndarray, list]:
    """The constant block shape, the constant [M, 2] paddings or crops, and input 0's
    dimensions after the batch (which must be known)."""
    block = node.const(1).astype(np.int64).reshape(-1)
    edges = node.const(pairs).astype(np.int64).reshape(-1)
    if edges.size != 2 * block.size:
        raise node.fail(f"{edges.size} edge values for a block of {block.size} axes")
    edges = edges.reshape(-1, 2)
    dims = node.dims(0)
    if len(edges) != len(block) or not 1 <= len(block) < len(dims) or (block < 1).any() or (edges < 0).any():
        raise node.fail(
            f"block shape {block.tolist()} and edges {edges.tolist()} do not fit an input of rank {len(dims)}"
        )
    rest = list(dims[1:])
    if not all(isinstance(d, int) for d in rest):
        raise node.unsupported(f"input dimensions {dims} after the batch must be known")
    return block, edges, rest


@rule("SPACE_TO_BATCH_ND", version=4, inputs=3)
def space_to_batch_nd(node: Node) -> list:
    """Zero-pad the M spatial axes, split each into (size / block, block), move the block
    offsets in front of the batch: [B, P1, …, PM, R] → [b1·…·bM·B, P1/b1, …, PM/bM, R]."""
    block, pads, rest = _blocks(node, 2)
    m = len(block)
    padded = [s + int(a + b) for s, (a, b) in zip(rest[:m], pads)]
    if any(p % b for p, b in zip(padded, block)):
        raise node.fail(f"padded sizes {padded} are not multiples of the block shape {block.tolist()}")
    x = node.inputs[0]
    if pads.any():
        zeros = [0] * (len(rest) - m)
        begins, ends = [0, *pads[:, 0].tolist(), *zeros], [0, *pads[:, 1].tolist(), *zeros]
        x = node.one("Pad", [x, node.ints(begins + ends)])
    split = [-1]
    for p, b in zip(padded, block):
        split += [p // int(b), int(b)]
    x = node.one("Reshape", [x, node.ints(split + rest[m:])])
    tail = list(range(2 * m + 1, 2 * m + 1 + len(rest) - m))
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + tail
    x = node.one("Transpose", [x], {"perm": perm})
    return node.op("Reshape", [x, node.ints([-1, *[p // int(b) for p, b in zip(padded, block)], *rest[m:]])])


@rule("BATCH_TO_SPACE_ND", version=4, inputs=3)
def batch_to_space_nd(node: Node) -> list:
    """The inverse: [b1·…·bM·B, S1, …, SM, R] → [B, S1·b1, …, SM·bM, R], then cropped."""
    block, crops, rest = _blocks(node, 2)
    m = len(block)
    x = node.one("Reshape", [node.inputs[0], node.ints([*block.tolist(), -1, *rest])])
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(2 * m + 1, m + 1 + len(rest)))
    x = node.one("Transpose", [x], {"perm": perm})
    grown = [s * int(b) for s, b in zip(rest[:m], block)]
    x = node.one("Reshape", [x, node.ints([-1, *grown, *rest[m:]])])
    if not crops.any():
        return [x]
    if any(int(a + b) > g for g, (a, b) in zip(grown, crops)):
        raise node.fail(f"crops {crops.tolist()} exceed the sizes {grown}")
    ends = [g - int(b) for g, (_, b) in zip(grown, crops)]
    axes = list(range(1, m + 1))
    return node.op("Slice", [x, node.ints(crops[:, 0]), node.ints(ends), node.ints(axes)])


# ---------------------------------------------------------------------------------------------
# Rules: one-hot, coordinates, rank, broadcast shapes.


@rule("ONE_HOT", version=1, inputs=4)
def one_hot(node: Node) -> list:
    """ONNX OneHot counts indices in [-depth, 0) from the end; TFLite gives them an all-off row,
    as any index outside [0, depth): a negative index becomes depth first."""
    indices, depth = node.inputs[:2]
    depth = node.one("Reshape", [depth, node.ints([])])
    idx_type = indices.type.dtype if indices.type is not None else DataType.INT32
    outside = node.one("Cast", [depth], {"to": int(idx_type)})
    zero = node.imp.const(np.zeros((), idx_type.numpy))
    indices = node.one("Where", [node.one("Less", [indices, zero]), outside, indices])
    values = node.one(
        "Concat", [node.one("Reshape", [v, node.ints([1])]) for v in node.inputs[3:1:-1]], {"axis": 0}
    )
    return node.op("OneHot", [indices, depth, values], {"axis": int(node.opt("axis"))})


@rule("WHERE", version=2)
def where(node: Node) -> list:
    """The coordinates of the true (nonzero) elements, one row each, in row-major order."""
    coords = node.one("Transpose", [node.one("NonZero", node.inputs[:1])], {"perm": [1, 0]})
    return [_cast_to_output(node, coords)]


@rule("RANK", version=1)
def rank(node: Node) -> list:
    return [_cast_to_output(node, node.one("Size", [node.one("Shape", node.inputs[:1])]))]


@rule("BROADCAST_ARGS", version=1, inputs=2)
def broadcast_args(node: Node) -> list:
    """The broadcast of two shapes: the shorter one padded with 1s in front, then per axis the
    other's size where one is 1."""
    sizes = [node.shape(i, 1)[0] for i in (0, 1)]
    dtype = _out_dtype(node)
    shapes = []
    for i, v in enumerate(node.inputs[:2]):
        if sizes[i] < max(sizes):
            ones = node.imp.const(np.ones(max(sizes) - sizes[i], dtype.numpy))
            v = node.one("Concat", [ones, v], {"axis": 0})
        shapes.append(v)
    a, b = shapes
    is_one = node.one("Equal", [a, node.imp.const(np.ones((), dtype.numpy))])
    return node.op("Where", [is_one, b, a])


# ---------------------------------------------------------------------------------------------
# Rules: scatters, segment reductions, embedding lookup.


def _zeros_like_output(node: Node, shape: Value, value=0) -> Value:
    fill = node.imp.const(np.full((), value, _out_dtype(node).numpy))
    return node.one("Expand", [fill, shape])


@rule("SCATTER_ND", version=1, inputs=3)
def scatter_nd(node: Node) -> list:
    """Updates added into zeros of the given shape (TFLite sums updates to the same index)."""
    zeros = _zeros_like_output(node, _int64(node, 2))
    return node.op("ScatterND", [zeros, _int64(node, 0), node.inputs[1]], {"reduction": "add"})


@rule("DYNAMIC_UPDATE_SLICE", version=2, inputs=3)
def dynamic_update_slice(node: Node) -> list:
    """``update`` written into ``operand`` at the start indices, each clamped to
    [0, operand size - update size] as LiteRT does: a ScatterND over the update's positions."""
    operand, update = node.shape(0), node.shape(1)
    if len(update) != len(operand) or any(u > o for u, o in zip(update, operand)):
        raise node.fail(f"update of shape {list(update)} does not fit the operand's {list(operand)}")
    if not update:  # scalars: the update is the result
        return node.op("Identity", [node.inputs[1]])
    start = node.one("Max", [_int64(node, 2), node.ints(np.zeros(len(operand)))])
    start = node.one("Min", [start, node.ints(np.subtract(operand, update))])
    # every position of the update, [*update, rank], computed (Range, Expand) rather than stored
    rank, zero, one = len(update), node.ints(0), node.ints(1)
    axes = []
    for k, size in enumerate(update):
        steps = node.one("Range", [zero, node.ints(size), one])
        column = node.one("Reshape", [steps, node.ints([size if a == k else 1 for a in range(rank)] + [1])])
        axes.append(node.one("Expand", [column, node.ints([*update, 1])]))
    grid = node.one("Concat", axes, {"axis": -1}) if rank > 1 else axes[0]
    indices = node.one("Add", [grid, start])
    return node.op("ScatterND", [node.inputs[0], indices, node.inputs[1]])


@rule("EMBEDDING_LOOKUP", version=4, inputs=2)
def embedding_lookup(node: Node) -> list:
    return node.op("Gather", [node.inputs[1], node.inputs[0]], {"axis": 0})


SEGMENT_REDUCTIONS = {  # reduction, and what a segment no id names holds
    "SEGMENT_SUM": ("add", 0),
    "UNSORTED_SEGMENT_SUM": ("add", 0),
    "UNSORTED_SEGMENT_PROD": ("mul", 1),
    "UNSORTED_SEGMENT_MAX": ("max", "lowest"),
    "UNSORTED_SEGMENT_MIN": ("min", "highest"),
}


@rule("SEGMENT_SUM", version=1, inputs=2)
@rule(
    "UNSORTED_SEGMENT_SUM", "UNSORTED_SEGMENT_PROD", "UNSORTED_SEGMENT_MAX", "UNSORTED_SEGMENT_MIN", inputs=3
)
def segment_reduce(node: Node) -> list:
    """Rows of ``data`` combined by segment id into ``[segments, …]`` with ScatterND's reduction.
    SEGMENT_SUM has max(id) + 1 segments, the unsorted forms ``num_segments``; an id outside
    [0, segments) (LiteRT skips negative ids) is sent to one row more, sliced off afterwards."""
    reduction, empty = SEGMENT_REDUCTIONS[node.name]
    dtype = _out_dtype(node)
    if empty in ("lowest", "highest"):
        info = np.finfo(dtype.numpy) if dtype.numpy.kind == "f" else np.iinfo(dtype.numpy)
        empty = info.min if empty == "lowest" else info.max
    ids = _int64(node, 1)
    id_rank = len(node.shape(1))
    if node.name == "SEGMENT_SUM":
        count = node.one("Add", [node.one("ReduceMax", [ids], {"keepdims": 0}), node.ints(1)])
    else:
        count = node.one("Reshape", [_int64(node, 2), node.ints([])])
    inside = node.one(
        "And", [node.one("GreaterOrEqual", [ids, node.ints(0)]), node.one("Less", [ids, count])]
    )
    ids = node.one("Where", [inside, ids, count])
    rows = node.one("Add", [count, node.ints(1)])
    data_shape = node.one("Shape", [node.inputs[0]])
    tail = node.one("Slice", [data_shape, node.ints([id_rank]), node.ints([INT64_MAX])])
    shape = node.one("Concat", [node.one("Reshape", [rows, node.ints([1])]), tail], {"axis": 0})
    init = _zeros_like_output(node, shape, empty)
    indices = node.one("Unsqueeze", [ids, node.ints([-1])])
    y = node.one("ScatterND", [init, indices, node.inputs[0]], {"reduction": reduction})
    return node.op("Slice", [y, node.ints([0]), node.one("Reshape", [count, node.ints([1])]), node.ints([0])])


# ---------------------------------------------------------------------------------------------
# Rules: diagonals, sequence reversal.


def _eye(node: Node, rows: int, cols: int) -> Value:
    """The [rows, cols] mask of the main diagonal, computed (Range, Equal) rather than stored."""
    zero, one = node.ints(0), node.ints(1)
    row = node.one("Unsqueeze", [node.one("Range", [zero, node.ints(rows), one]), node.ints([1])])
    return node.one("Equal", [row, node.one("Range", [zero, node.ints(cols), one])])


@rule("MATRIX_DIAG", version=1)
def matrix_diag(node: Node) -> list:
    """[…, N] → […, N, N] with the input on the diagonal and zeros elsewhere."""
    n = node.shape(0)[-1] if node.shape(0) else None
    if not n or n < 0:
        raise node.unsupported(f"input of shape {list(node.shape(0))}: its last dimension must be known")
    zero = node.imp.const(np.zeros((), _out_dtype(node).numpy))
    row = node.one("Unsqueeze", [node.inputs[0], node.ints([-2])])
    return node.op("Where", [_eye(node, n, n), row, zero])


@rule("MATRIX_SET_DIAG", version=1, inputs=2)
def matrix_set_diag(node: Node) -> list:
    """[…, M, N] with its main diagonal replaced by the […, min(M, N)] input."""
    shape = node.shape(0)
    if len(shape) < 2 or min(shape[-2:]) < 0:
        raise node.unsupported(f"input of shape {list(shape)}: its last two dimensions must be known")
    m, n = shape[-2:]
    diagonal = node.inputs[1]
    if n > m:  # the diagonal ends at column m: the columns after it are off the diagonal
        rank = len(node.shape(1))
        pads = [0] * (2 * rank)
        pads[2 * rank - 1] = n - m
        diagonal = node.one("Pad", [diagonal, node.ints(pads)])
    row = node.one("Unsqueeze", [diagonal, node.ints([-2])])
    return node.op("Where", [_eye(node, m, n), row, node.inputs[0]])


@rule("REVERSE_SEQUENCE", version=2, inputs=2)
def reverse_sequence(node: Node) -> list:
    """ONNX ReverseSequence takes the batch and time axes among the first two: other axes are
    moved there and back."""
    rank = len(node.dims(0))
    seq, batch = int(node.opt("seq_dim")), int(node.opt("batch_dim"))
    if not (0 <= seq < rank and 0 <= batch < rank) or seq == batch:
        raise node.fail(f"seq_dim {seq} and batch_dim {batch} are not two axes of rank {rank}")
    lengths = _int64(node, 1)
    if {seq, batch} == {0, 1}:
        return node.op("ReverseSequence", [node.inputs[0], lengths], {"batch_axis": batch, "time_axis": seq})
    perm = [batch, seq] + [a for a in range(rank) if a not in (batch, seq)]
    x = node.one("Transpose", [node.inputs[0]], {"perm": perm})
    y = node.one("ReverseSequence", [x, lengths], {"batch_axis": 0, "time_axis": 1})
    return node.op("Transpose", [y], {"perm": np.argsort(perm).tolist()})


# ---------------------------------------------------------------------------------------------
# Rules: dense from sparse, unique values, buckets, dilation.


@rule("SPARSE_TO_DENSE", version=3, inputs=4)
def sparse_to_dense(node: Node) -> list:
    """The default value expanded to the output shape, the values scattered at the indices
    ([N, rank], [N] for a rank-1 output, or one scalar index); a scalar value fills every index."""
    rank = len(node.shape(0))
    if rank > 2:
        raise node.fail(f"indices of rank {rank} (0, 1 or 2)")
    indices = _int64(node, 0)
    if rank < 2:
        indices = node.one("Reshape", [indices, node.ints([-1, 1])])
    default = node.one("Reshape", [node.inputs[3], node.ints([])])
    dense = node.one("Expand", [default, _int64(node, 1)])
    count = node.one("Shape", [indices], {"end": 1})
    values = node.one("Expand", [node.inputs[2], count]) if len(node.shape(2)) == 0 else node.inputs[2]
    return node.op("ScatterND", [dense, indices, values])


@rule("UNIQUE", version=1)
def unique(node: Node) -> list:
    """The distinct values in the order they first appear, and each element's index among them."""
    y, _, inverse, _ = node.op("Unique", node.inputs[:1], {"sorted": 0}, 4)
    return [y, _cast_to_output(node, inverse, 1)]


@rule("BUCKETIZE", version=1)
def bucketize(node: Node) -> list:
    """The number of boundaries not above x (std::upper_bound's position; x is compared as
    float32, and a NaN lands past every boundary)."""
    boundaries = np.asarray(node.opt("boundaries") if node.opt("boundaries") is not None else [], np.float32)
    if (np.diff(boundaries) < 0).any():
        raise node.fail(f"boundaries {boundaries.tolist()} are not sorted")
    x = node.inputs[0]
    if node.tensors[0].get("type") != TflType.FLOAT32:
        x = node.one("Cast", [x], {"to": int(DataType.FLOAT)})
    below = node.one("Less", [node.one("Unsqueeze", [x, node.ints([-1])]), node.imp.const(boundaries)])
    passed = node.one("Cast", [node.one("Not", [below])], {"to": int(DataType.INT32)})
    return node.op("ReduceSum", [passed, node.ints([-1])], {"keepdims": 0})


@rule("DILATE", version=1, inputs=3)
def dilate(node: Node) -> list:
    dims = node.shape(0)
    dilations = node.const(1).astype(np.int64).reshape(-1)
    if len(dilations) != len(dims) or (dilations < 1).any() or min(dims, default=0) < 0:
        raise node.fail(f"dilations {dilations.tolist()} do not fit an input of shape {list(dims)}")
    fill = node.one("Reshape", [node.inputs[2], node.ints([])])
    x, _ = _dilated(node, node.inputs[0], list(dims), dilations.tolist(), fill)
    return [x if x is not node.inputs[0] else node.one("Identity", [x])]


def _dilated(node: Node, x: Value, shape: list, dilations: list, fill: Value) -> tuple[Value, list]:
    """``x`` with d - 1 ``fill`` values between neighbours along each axis (d its dilation): per
    dilated axis, a new axis after it padded to d, merged into it, the trailing padding cut.
    Returns the value and its shape."""
    shape = list(shape)
    for axis, d in enumerate(dilations):
        if d == 1 or shape[axis] == 0:
            continue
        x = node.one("Unsqueeze", [x, node.ints([axis + 1])])
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + axis + 1] = d - 1
        x = node.one("Pad", [x, node.ints(pads), fill])
        merged = shape[axis] * d
        x = node.one("Reshape", [x, node.ints(shape[:axis] + [merged] + shape[axis + 1 :])])
        shape[axis] = merged - (d - 1)
        x = node.one("Slice", [x, node.ints([0]), node.ints([shape[axis]]), node.ints([axis])])
    return x, shape


@rule("STABLEHLO_PAD", version=1, inputs=2)
def stablehlo_pad(node: Node) -> list:
    """Interior padding between neighbours (as DILATE, interior + 1), then the edges: a positive
    edge pads with the padding value, a negative one cuts."""
    kind, options = node.operator.get("builtin_options_2")
    if kind != "StablehloPadOptions":
        raise node.fail(f"has options {kind}, not StablehloPadOptions")
    dims = list(node.shape(0))
    low, high, interior = (
        np.asarray(options.get(f) if options.get(f) is not None else [], np.int64).reshape(-1)
        for f in ("edge_padding_low", "edge_padding_high", "interior_padding")
    )
    if (
        not len(low) == len(high) == len(interior) == len(dims)
        or (interior < 0).any()
        or min(dims, default=0) < 0
    ):
        raise node.fail(
            f"paddings {low.tolist()}, {high.tolist()}, {interior.tolist()} do not fit shape {dims}"
        )
    fill = node.one("Reshape", [node.inputs[1], node.ints([])])
    x, shape = _dilated(node, node.inputs[0], dims, (interior + 1).tolist(), fill)
    if (low > 0).any() or (high > 0).any():
        x = node.one("Pad", [x, node.ints(np.concatenate([np.maximum(low, 0), np.maximum(high, 0)])), fill])
    if (low < 0).any() or (high < 0).any():
        full = np.array(shape) + np.maximum(low, 0) + np.maximum(high, 0)
        start, end = -np.minimum(low, 0), full + np.minimum(high, 0)
        if (end < start).any():
            raise node.fail(f"edges {low.tolist()}, {high.tolist()} cut more than the shape {shape}")
        x = node.one("Slice", [x, node.ints(start), node.ints(end)])
    return [x if x is not node.inputs[0] else node.one("Identity", [x])]


COMBINERS = {0: "SUM", 1: "MEAN", 2: "SQRTN"}


@rule("EMBEDDING_LOOKUP_SPARSE", version=1, inputs=5)
def embedding_lookup_sparse(node: Node) -> list:
    """Inputs: ids [N], sparse indices [N, k], the constant dense shape [k], weights [N], the
    table [V, …]. Each lookup's row of the table, times its weight, is added into the output
    row its indices name without the last (ScatterND add); MEAN divides each row by the sum
    of its weights, SQRTN by the root of the sum of their squares; a row no lookup names is
    zeros."""
    combiner = COMBINERS.get(node.opt("combiner"))
    if combiner is None:
        raise node.fail(f"combiner {node.opt('combiner')} is none of SUM, MEAN, SQRTN")
    dense = node.const(2).astype(np.int64).reshape(-1)
    table = node.dims(4)
    if len(dense) < 1 or (dense < 0).any() or not all(isinstance(d, int) for d in table[1:]):
        raise node.fail(f"dense shape {dense.tolist()} or table shape {table} is not usable")
    rows = int(np.prod(dense[:-1]))
    strides = np.cumprod([1, *dense[1:-1][::-1]])[::-1].astype(np.int64)  # row-major over dense[:-1]
    bucket = node.one("Slice", [_int64(node, 1), node.ints([0]), node.ints([len(dense) - 1]), node.ints([1])])
    bucket = node.one(
        "ReduceSum", [node.one("Mul", [bucket, node.ints(strides)]), node.ints([1])], {"keepdims": 1}
    )
    weights = node.inputs[3]
    picked = node.one("Gather", [node.inputs[4], node.inputs[0]], {"axis": 0})
    scale = node.one("Reshape", [weights, node.ints([-1] + [1] * (len(table) - 1))])
    zeros = node.imp.const(np.zeros((rows, *table[1:]), np.float32))
    sums = node.one("ScatterND", [zeros, bucket, node.one("Mul", [picked, scale])], {"reduction": "add"})
    if combiner != "SUM":
        per_row = node.imp.const(np.zeros(rows, np.float32))
        w = weights if combiner == "MEAN" else node.one("Mul", [weights, weights])
        total = node.one("ScatterND", [per_row, bucket, w], {"reduction": "add"})
        ones = node.one("Expand", [node.scalar(1.0), node.one("Shape", [weights])])
        count = node.one("ScatterND", [per_row, bucket, ones], {"reduction": "add"})
        total = total if combiner == "MEAN" else node.one("Sqrt", [total])
        shape = node.ints([-1] + [1] * (len(table) - 1))
        total, named = (node.one("Reshape", [v, shape]) for v in (total, count))
        named = node.one("Greater", [named, node.scalar(0.0)])
        sums = node.one("Where", [named, node.one("Div", [sums, total]), sums])
    return node.op("Reshape", [sums, node.ints([*dense[:-1].tolist(), *table[1:]])])
