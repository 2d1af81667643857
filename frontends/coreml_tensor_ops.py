"""MIL op rules: shapes and tensor movement (reshape, transpose, concat, slices, gathers, pads,
resizes …), with MIL's semantics written in ONNX ops.

MIL's integer outputs (indices, shapes) are int32 where ONNX gives int64: a Cast follows. Where a
MIL op has no ONNX counterpart of the same meaning (pixel_unshuffle, space_to_batch, bilinear
sampling modes, sliding windows …) the rule writes it out in Reshape / Transpose / Gather.
"""

from __future__ import annotations

import numpy as np

from offload.ir import DataType, Value

from .coreml_node import Node, rule

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
FLOATS = (DataType.FLOAT, DataType.FLOAT16, DataType.DOUBLE, DataType.BFLOAT16)


def _axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _int64(node: Node, name: str) -> Value:
    """Input ``name`` as an int64 tensor (ONNX's shapes, indices and counts)."""
    v = node.x(name)
    return v if node.dtype(name) == DataType.INT64 else node.cast(v, DataType.INT64)


def _static_dims(node: Node, name: str, axes) -> list[int]:
    shape = node.shape(name)
    if shape is None:
        raise node.unsupported(f"input '{name}' has an unknown shape")
    dims = [shape[a] for a in axes]
    if not all(isinstance(d, int) for d in dims):
        raise node.unsupported(f"input '{name}' has dimensions of unknown size {list(shape)}")
    return dims


@rule("reshape")
def reshape(node: Node) -> list:
    """To the declared shape when it is static; otherwise MIL's shape, whose 0 copies a dim of x
    (at the same index, or with a shape of another length (iOS17) aligned from the right)."""
    out = node.out().shape
    if out is not None and all(isinstance(d, int) for d in out):
        return node.op("Reshape", [node.x("x"), node.int64s(out)])
    shape = _int64(node, "shape")
    rank, k = node.rank("x"), _static_dims(node, "shape", [0])[0]
    if k != rank:  # MIL's 0 copies the dim of x aligned from the right (ONNX's: at the same index)
        src = [rank - (k - i) for i in range(k)]
        idx = [j if 0 <= j < rank else rank for j in src]  # no such dim: 1
        dims = node.one("Concat", [node.one("Shape", [node.x("x")]), node.int64s([1])], {"axis": 0})
        copied = node.one("Gather", [dims, node.int64s(idx)])
        shape = node.one("Where", [node.one("Equal", [shape, node.int64s(0)]), copied, shape])
    return node.op("Reshape", [node.x("x"), shape])


@rule("reshape_like", since="iOS16")
def reshape_like(node: Node) -> list:
    """To the declared shape (coremltools requires it static)."""
    out = node.out().shape
    if out is None or not all(isinstance(d, int) for d in out):
        raise node.unsupported("reshape_like to a shape known only when the model runs")
    return node.op("Reshape", [node.x("x"), node.int64s(out)])


@rule("transpose")
def transpose(node: Node) -> list:
    return node.op("Transpose", [node.x("x")], {"perm": node.ints("perm")})


@rule("concat")
def concat(node: Node) -> list:
    """interleave: the inputs (of one shape) alternate along ``axis``: stacked on a new axis after
    it, then the two axes merged (to the declared shape)."""
    axis = int(node.scalar("axis"))
    if not node.scalar("interleave", False):
        return node.op("Concat", node.values("values"), {"axis": axis})
    out = node.out().shape
    if out is None or not all(isinstance(d, int) for d in out):
        raise node.unsupported("concat interleave=True to a shape known only when the model runs")
    axis %= len(out)
    ax = node.int64s([axis + 1])
    stacked = node.one(
        "Concat", [node.one("Unsqueeze", [v, ax]) for v in node.values("values")], {"axis": axis + 1}
    )
    return node.op("Reshape", [stacked, node.int64s(out)])


@rule("stack")
def stack(node: Node) -> list:
    """A new axis at ``axis`` of the output (negative counts from the output's rank)."""
    values = node.values("values")
    axis = int(node.scalar("axis"))
    if axis < 0:
        out = node.out().shape
        if out is None:
            raise node.unsupported("a negative axis with an output of unknown rank")
        axis += len(out)
    ax = node.int64s([axis])
    return node.op("Concat", [node.one("Unsqueeze", [v, ax]) for v in values], {"axis": axis})


@rule("squeeze")
def squeeze(node: Node) -> list:
    """Axes whose size is not 1 are left alone (PyTorch's squeeze), ONNX's Squeeze would refuse them."""
    axes = node.ints("axes", None)
    shape = node.shape("x")
    if axes is not None and shape is not None:
        axes = [a for a in axes if not isinstance(shape[a], int) or shape[a] == 1]
        if not axes:
            return node.op("Identity", [node.x("x")])
    inputs = [node.x("x")] + ([] if axes is None else [node.int64s(axes)])
    return node.op("Squeeze", inputs)


@rule("expand_dims")
def expand_dims(node: Node) -> list:
    return node.op("Unsqueeze", [node.x("x"), node.int64s(node.ints("axes"))])


@rule("flatten2d")
def flatten2d(node: Node) -> list:
    return node.op("Flatten", [node.x("x")], {"axis": int(node.scalar("axis", 1))})


@rule("shape")
def shape(node: Node) -> list:
    return [node.cast(node.one("Shape", [node.x("x")]), node.out().dtype)]


# ---------------------------------------------------------------------------------------------
# Slices.


def _masked(node: Node, name: str, mask: list[bool], fill: list[int]) -> Value:
    """Input ``name`` (int64) with the positions ``mask`` marks replaced by ``fill``."""
    if node.is_const(name):
        v = np.asarray(node.ints(name), np.int64)
        return node.int64s(np.where(mask, fill, v))
    v = _int64(node, name)
    if not any(mask):
        return v
    return node.one("Where", [node.imp.const(np.asarray(mask, bool)), node.int64s(fill), v])


@rule("slice_by_index")
def slice_by_index(node: Node) -> list:
    """numpy's x[begin:end:stride, …]: a mask makes begin / end numpy's None (the end the stride
    walks from / to), squeeze_mask takes the single index begin[i] and drops the axis."""
    rank = node.rank("x")
    stride = node.ints("stride", [1] * rank)
    if 0 in stride:
        raise node.fail("stride 0")
    bmask = [bool(b) for b in node.ints("begin_mask", [0] * rank)]
    emask = [bool(b) for b in node.ints("end_mask", [0] * rank)]
    smask = [bool(b) for b in node.ints("squeeze_mask", [0] * rank)]
    if not all(len(v) == rank for v in (stride, bmask, emask, smask)):
        raise node.fail(f"slice parameters are not of length {rank}")
    steps = [1 if s else st for s, st in zip(smask, stride)]
    bfill = [0 if st > 0 else INT64_MAX for st in steps]
    starts = _masked(node, "begin", [b and not s for b, s in zip(bmask, smask)], bfill)
    efill = [INT64_MAX if st > 0 else INT64_MIN for st in steps]
    ends = _masked(node, "end", [e and not s for e, s in zip(emask, smask)], efill)
    if any(smask):
        # The single index begin[i]: up to begin[i] + 1, or to the end of the axis for begin[i] = -1.
        if starts.const_value is not None and ends.const_value is not None:
            b = np.asarray(starts.const_value)
            single = np.where(b == -1, INT64_MAX, np.minimum(b, INT64_MAX - 1) + 1)
            ends = node.int64s(np.where(smask, single, np.asarray(ends.const_value)))
        else:
            last = node.one("Equal", [starts, node.int64s([-1] * rank)])
            single = node.one(
                "Where",
                [last, node.int64s([INT64_MAX] * rank), node.one("Add", [starts, node.int64s([1] * rank)])],
            )
            ends = node.one("Where", [node.imp.const(np.asarray(smask, bool)), single, ends])
    y = node.one("Slice", [node.x("x"), starts, ends, node.int64s(list(range(rank))), node.int64s(steps)])
    if any(smask):
        y = node.one("Squeeze", [y, node.int64s([i for i in range(rank) if smask[i]])])
    return [y]


@rule("slice_by_size")
def slice_by_size(node: Node) -> list:
    """x[begin[i] : begin[i] + size[i]], size -1 to the end of the axis; a negative begin counts
    from the end."""
    rank = node.rank("x")
    axes = node.int64s(list(range(rank)))
    if node.is_const("begin") and node.is_const("size"):
        begin, size = node.ints("begin"), node.ints("size")
        if len(begin) != rank or len(size) != rank:
            raise node.fail(f"begin {begin} / size {size} are not of length {rank}")
        shape = node.shape("x")
        for i, b in enumerate(begin):
            if b < 0 and size[i] != -1:
                if not isinstance(shape[i], int):
                    raise node.unsupported(f"a negative begin on an axis of unknown size {shape[i]}")
                begin[i] = b + shape[i]
        ends = [INT64_MAX if s == -1 else b + s for b, s in zip(begin, size)]
        return node.op("Slice", [node.x("x"), node.int64s(begin), node.int64s(ends), axes])
    begin, size = _int64(node, "begin"), _int64(node, "size")
    zero = node.int64s([0] * rank)
    begin = node.one(
        "Where",
        [node.one("Less", [begin, zero]), node.one("Add", [begin, node.one("Shape", [node.x("x")])]), begin],
    )
    to_end = node.one("Equal", [size, node.int64s([-1] * rank)])
    ends = node.one("Where", [to_end, node.int64s([INT64_MAX] * rank), node.one("Add", [begin, size])])
    return node.op("Slice", [node.x("x"), begin, ends, axes])


@rule("crop")
def crop(node: Node) -> list:
    """Drops crop_height[0] / [1] rows from the top / bottom, crop_width[0] / [1] columns."""
    ch, cw = node.ints("crop_height"), node.ints("crop_width")
    starts = [ch[0], cw[0]]
    ends = [-ch[1] if ch[1] else INT64_MAX, -cw[1] if cw[1] else INT64_MAX]
    return node.op("Slice", [node.x("x"), node.int64s(starts), node.int64s(ends), node.int64s([-2, -1])])


@rule("slice_update", since="iOS18")
def slice_update(node: Node) -> list:
    """x with x[begin:end:stride, …] (slice_by_index's slice) replaced by ``update``: a ScatterND at
    the slice's element indices begin[i] + k·stride[i], k < the update's size on axis i (begin
    masked: the first element the stride walks, negative: from the end)."""
    rank = node.rank("x")
    stride = node.ints("stride", [1] * rank)
    bmask = [bool(b) for b in node.ints("begin_mask", [0] * rank)]
    smask = [bool(b) for b in node.ints("squeeze_mask", [0] * rank)]
    ushape = list(node.shape("update") or ())
    for i in range(rank):
        if smask[i]:
            ushape.insert(i, 1)
    if len(ushape) != rank or not all(isinstance(d, int) for d in ushape):
        raise node.unsupported(f"slice_update with an update of unknown shape {node.shape('update')}")
    steps = [1 if s else st for s, st in zip(smask, stride)]
    fill = [0 if st > 0 else -1 for st in steps]
    starts = _masked(node, "begin", [b and not s for b, s in zip(bmask, smask)], fill)
    shape = node.shape("x")
    ranges = [np.arange(n) * st for n, st in zip(ushape, steps)]
    if starts.const_value is not None and all(isinstance(d, int) for d in shape):
        b = np.asarray(starts.const_value)
        b = np.where(b < 0, b + np.asarray(shape), b)
        grid = np.stack(np.meshgrid(*(r + o for r, o in zip(ranges, b)), indexing="ij"), axis=-1)
        indices = node.imp.const(grid.astype(np.int64))
    else:
        dims = node.one("Shape", [node.x("x")])
        zero = node.int64s([0] * rank)
        starts = node.one(
            "Where", [node.one("Less", [starts, zero]), node.one("Add", [starts, dims]), starts]
        )
        full = node.int64s([*ushape, 1])
        parts = []
        for i, r in enumerate(ranges):
            at = node.one("Add", [node.one("Gather", [starts, node.int64s([i])]), node.int64s(r)])
            at = node.one("Reshape", [at, node.int64s([-1 if k == i else 1 for k in range(rank)] + [1])])
            parts.append(node.one("Expand", [at, full]))
        indices = node.one("Concat", parts, {"axis": -1})
    update = node.one("Reshape", [node.x("update"), node.int64s(ushape)])
    return node.op("ScatterND", [node.x("x"), indices, update])


# ---------------------------------------------------------------------------------------------
# Gathers and scatters.


@rule("gather")
def gather(node: Node) -> list:
    """tf.gather; with batch_dims (iOS16) a GatherND over the batch axes (the gathered axis moved
    next to them when it is further)."""
    axis = int(node.scalar("axis", 0))
    batch_dims = int(node.scalar("batch_dims", 0))
    x, indices = node.x("x"), _int64(node, "indices")
    if batch_dims == 0:
        return node.op("Gather", [x, indices], {"axis": axis})
    rank = node.rank("x")
    if batch_dims < 0:
        batch_dims += node.rank("indices")
    axis = _axis(node, axis, rank)
    if axis < batch_dims:
        raise node.fail(f"gather axis {axis} is one of its {batch_dims} batch axes")
    b, m = batch_dims, node.rank("indices") - batch_dims
    if axis > b:  # the gathered axis moved to just after the batch axes, the result's axes back
        x = node.one("Transpose", [x], {"perm": [*range(b), axis, *range(b, axis), *range(axis + 1, rank)]})
        y = _gather_batched(node, x, indices, b)
        k = axis - b  # x's axes between the batch and the gathered one
        perm = [*range(b), *range(b + m, b + m + k), *range(b, b + m), *range(b + m + k, rank - 1 + m)]
        return node.op("Transpose", [y], {"perm": perm})
    return [_gather_batched(node, x, indices, b)]


def _gather_batched(node: Node, x: Value, indices: Value, batch_dims: int) -> Value:
    """gather on axis ``batch_dims`` of ``x``, batched over the axes before it: GatherND."""
    # Non-negative indices as GatherND wants them, one per position of the batch.
    dim = node.one("Gather", [node.one("Shape", [x]), node.int64s([batch_dims])])
    negative = node.one("Less", [indices, node.int64s(0)])
    wrapped = node.one("Where", [negative, node.one("Add", [indices, dim]), indices])
    last = node.one("Unsqueeze", [wrapped, node.int64s([-1])])
    return node.one("GatherND", [x, last], {"batch_dims": batch_dims})


@rule("gather_along_axis")
def gather_along_axis(node: Node) -> list:
    return node.op(
        "GatherElements", [node.x("x"), _int64(node, "indices")], {"axis": int(node.scalar("axis", 0))}
    )


@rule("gather_nd")
def gather_nd(node: Node) -> list:
    return node.op(
        "GatherND", [node.x("x"), _int64(node, "indices")], {"batch_dims": int(node.scalar("batch_dims", 0))}
    )


_REDUCTIONS = {
    "update": "none",
    "add": "add",
    "mul": "mul",
    "max": "max",
    "min": "min",
    "sub": "add",
    "div": "mul",
}


def _scatter_mode(node: Node, default: str) -> tuple[str, Value]:
    """ONNX's reduction for MIL's mode, and the updates it applies: sub adds -updates; div (floats)
    multiplies by 1/updates."""
    mode = str(node.scalar("mode", default))
    if mode not in _REDUCTIONS:
        raise node.unsupported(f"scatter mode '{mode}'")
    updates = node.x("updates")
    if mode == "sub":
        updates = node.one("Neg", [updates])
    elif mode == "div":
        if node.dtype("updates") not in FLOATS:
            raise node.unsupported("scatter mode 'div' on integers")
        updates = node.one("Reciprocal", [updates])
    return _REDUCTIONS[mode], updates


@rule("scatter")
def scatter(node: Node) -> list:
    """Whole slices: data[..., indices[i], ...] (axis) op= updates[..., i, ...]; written as
    ScatterElements with the 1-D indices broadcast to the updates' shape."""
    reduction, updates = _scatter_mode(node, "update")
    rank = node.rank("data")
    axis = _axis(node, int(node.scalar("axis", 0)), rank)
    indices = _int64(node, "indices")
    shape = [1] * rank
    shape[axis] = -1
    idx = node.one("Reshape", [indices, node.int64s(shape)])
    idx = node.one("Expand", [idx, node.one("Shape", [updates])])
    return node.op("ScatterElements", [node.x("data"), idx, updates], {"axis": axis, "reduction": reduction})


@rule("scatter_along_axis")
def scatter_along_axis(node: Node) -> list:
    reduction, updates = _scatter_mode(node, "add")
    attrs = {"axis": int(node.scalar("axis", 0)), "reduction": reduction}
    return node.op("ScatterElements", [node.x("data"), _int64(node, "indices"), updates], attrs)


@rule("scatter_nd")
def scatter_nd(node: Node) -> list:
    reduction, updates = _scatter_mode(node, "add")
    return node.op("ScatterND", [node.x("data"), _int64(node, "indices"), updates], {"reduction": reduction})


# ---------------------------------------------------------------------------------------------
# Pads, tiles, splits.


@rule("pad")
def pad(node: Node) -> list:
    """``pad`` lists [begin, end] for each of the last len(pad)/2 axes; replicate is ONNX's edge."""
    rank = node.rank("x")
    mode = str(node.scalar("mode", "constant"))
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise node.unsupported(f"pad mode '{mode}'")
    if node.is_const("pad"):
        p = node.ints("pad")
        if len(p) % 2 or len(p) > 2 * rank:
            raise node.fail(f"pad {p} for rank {rank}")
        lead = [0] * (rank - len(p) // 2)
        pads = node.int64s(lead + p[0::2] + lead + p[1::2])
    else:  # [b0, e0, b1, e1, …] for every axis → [b0, b1, …, e0, e1, …]
        pairs = node.one("Reshape", [_int64(node, "pad"), node.int64s([-1, 2])])
        pads = node.one("Reshape", [node.one("Transpose", [pairs], {"perm": [1, 0]}), node.int64s([-1])])
    inputs = [node.x("x"), pads]
    if mode == "constant":
        inputs.append(node.full(node.scalar("constant_val", 0.0), node.dtype("x")))
    return node.op("Pad", inputs, {"mode": modes[mode]})


@rule("tile")
def tile(node: Node) -> list:
    return node.op("Tile", [node.x("x"), _int64(node, "reps")])


@rule("split")
def split(node: Node) -> list:
    rank = node.rank("x")
    axis = _axis(node, int(node.scalar("axis")), rank)
    n = len(node.outputs)
    sizes = node.ints("split_sizes", None)
    if sizes is None:
        dim = node.shape("x")[axis]
        if isinstance(dim, int):
            if dim % n:
                raise node.fail(f"an axis of {dim} does not split into {n} equal parts")
            sizes = [dim // n] * n
        else:
            return node.op("Split", [node.x("x")], {"axis": axis, "num_outputs": n}, n)
    if len(sizes) != n:
        raise node.fail(f"{len(sizes)} split sizes for {n} outputs")
    return node.op("Split", [node.x("x"), node.int64s(sizes)], {"axis": axis}, n)


@rule("sliding_windows")
def sliding_windows(node: Node) -> list:
    """Windows x[k·stride : k·stride + size] along ``axis``, stacked as axes [windows, size]: one
    Gather with a [windows, size] index matrix."""
    rank = node.rank("x")
    axis = _axis(node, int(node.scalar("axis")), rank)
    size, stride = int(node.scalar("size")), int(node.scalar("stride", 1))
    (dim,) = _static_dims(node, "x", [axis])
    count = (dim - size) // stride + 1
    idx = np.arange(count)[:, None] * stride + np.arange(size)[None, :]
    return node.op("Gather", [node.x("x"), node.imp.const(idx.astype(np.int64))], {"axis": axis})


# ---------------------------------------------------------------------------------------------
# Sorting and cumulative ops.


def _axis_size(node: Node, axis: int) -> Value:
    rank = node.rank("x")
    dim = node.shape("x")[axis]
    if isinstance(dim, int):
        return node.int64s([dim])
    a = axis % rank
    return node.one("Shape", [node.x("x")], {"start": a, "end": a + 1})


@rule("topk")
def topk(node: Node) -> list:
    """k largest (smallest when ascending) along ``axis``; k -1 (iOS17) all of them. Always sorted
    (MIL leaves the order free when sort=False). Indices int32 (or uint16, iOS17)."""
    axis = int(node.scalar("axis", -1))
    ascending = bool(node.scalar("ascending", False))
    if node.has("k") and not node.is_const("k"):
        k = node.one("Reshape", [_int64(node, "k"), node.int64s([1])])
    else:
        count = int(node.scalar("k", 1))
        k = _axis_size(node, axis) if count == -1 else node.int64s([count])
    attrs = {"axis": axis, "largest": int(not ascending), "sorted": 1}
    values, indices = node.op("TopK", [node.x("x"), k], attrs, 2)
    if not node.scalar("return_indices", True):
        return [values]
    return [values, node.cast(indices, node.out(1).dtype)]


@rule("argsort")
def argsort(node: Node) -> list:
    """Indices (int32) of the values sorted along ``axis``, descending unless ``ascending``."""
    axis = int(node.scalar("axis", -1))
    ascending = bool(node.scalar("ascending", False))
    _, idx = node.op(
        "TopK",
        [node.x("x"), _axis_size(node, axis)],
        {"axis": axis, "largest": int(not ascending), "sorted": 1},
        2,
    )
    return [node.cast(idx, node.out().dtype)]


@rule("cumsum")
def cumsum(node: Node) -> list:
    attrs = {
        "exclusive": int(bool(node.scalar("exclusive", False))),
        "reverse": int(bool(node.scalar("reverse", False))),
    }
    return node.op("CumSum", [node.x("x"), node.int64s(int(node.scalar("axis", 0)))], attrs)


# ---------------------------------------------------------------------------------------------
# Generated tensors.


@rule("fill")
def fill(node: Node) -> list:
    dtype = node.out().dtype
    value = np.asarray([node.scalar("value", 0.0)], dtype.numpy)
    return node.op("ConstantOfShape", [_int64(node, "shape")], {"value": value})


@rule("fill_like", since="iOS16")
def fill_like(node: Node) -> list:
    dtype = node.out().dtype
    value = np.asarray([node.scalar("value", 0.0)], dtype.numpy)
    return node.op("ConstantOfShape", [node.one("Shape", [node.x("ref_tensor")])], {"value": value})


@rule("range_1d")
def range_1d(node: Node) -> list:
    t = node.out().dtype
    scalars = []
    for name in ("start", "end", "step"):
        v = node.x(name)
        if node.dtype(name) != t:
            v = node.cast(v, t)
        scalars.append(node.one("Reshape", [v, node.int64s([])]))
    return node.op("Range", scalars)


@rule("one_hot")
def one_hot(node: Node) -> list:
    """ONNX's OneHot (MIL does not say what a negative index gives: here, ONNX's count from the end)."""
    t = node.out().dtype
    on, off = node.scalar("on_value", 1), node.scalar("off_value", 0)
    values = node.imp.const(np.asarray([off, on], t.numpy))
    depth = node.x("one_hot_vector_size")
    return node.op("OneHot", [_int64(node, "indices"), depth, values], {"axis": int(node.scalar("axis", -1))})


@rule("select")
def select(node: Node) -> list:
    cond = node.x("cond")
    if node.dtype("cond") != DataType.BOOL:
        cond = node.cast(cond, DataType.BOOL)
    return node.op("Where", [cond, node.x("a"), node.x("b")])


@rule("band_part")
def band_part(node: Node) -> list:
    """Keeps m - n ≤ lower and n - m ≤ upper of the last two axes (negative: all of that side)."""
    lower, upper = int(node.scalar("lower", -1)), int(node.scalar("upper", -1))
    y = node.x("x")
    if upper < 0 and lower < 0:
        return node.op("Identity", [y])
    if upper >= 0:
        y = node.one("Trilu", [y, node.int64s(upper)], {"upper": 0})
    if lower >= 0:
        y = node.one("Trilu", [y, node.int64s(-lower)], {"upper": 1})
    return [y]


@rule("non_zero")
def non_zero(node: Node) -> list:
    """[N, rank] int32 (ONNX: [rank, N] int64)."""
    nz = node.one("NonZero", [node.x("x")])
    return [node.cast(node.one("Transpose", [nz], {"perm": [1, 0]}), node.out().dtype)]


# ---------------------------------------------------------------------------------------------
# Reversals.


@rule("reverse")
def reverse(node: Node) -> list:
    rank = node.rank("x")
    axes = node.ints("axes", None)
    axes = list(range(rank)) if axes is None else [_axis(node, a, rank) for a in axes]
    if not axes:
        return node.op("Identity", [node.x("x")])
    n = len(axes)
    return node.op(
        "Slice",
        [
            node.x("x"),
            node.int64s([-1] * n),
            node.int64s([INT64_MIN] * n),
            node.int64s(axes),
            node.int64s([-1] * n),
        ],
    )


@rule("reverse_sequence")
def reverse_sequence(node: Node) -> list:
    """Any seq_axis / batch_axis: moved to the front for ONNX's ReverseSequence (axes 0 and 1)."""
    rank = node.rank("x")
    seq = _axis(node, int(node.scalar("seq_axis", 0)), rank)
    batch = _axis(node, int(node.scalar("batch_axis", 0)), rank)
    if seq == batch:
        raise node.fail("seq_axis and batch_axis are the same axis")
    lengths = _int64(node, "lengths")
    if sorted((seq, batch)) == [0, 1]:
        return node.op("ReverseSequence", [node.x("x"), lengths], {"time_axis": seq, "batch_axis": batch})
    perm = [seq, batch] + [i for i in range(rank) if i not in (seq, batch)]
    inverse = [perm.index(i) for i in range(rank)]
    y = node.one("Transpose", [node.x("x")], {"perm": perm})
    y = node.one("ReverseSequence", [y, lengths], {"time_axis": 0, "batch_axis": 1})
    return node.op("Transpose", [y], {"perm": inverse})


# ---------------------------------------------------------------------------------------------
# Depth / space / batch rearrangements (NCHW).


@rule("depth_to_space")
def depth_to_space(node: Node) -> list:
    """TensorFlow's (ONNX's DCR): channel (i·b + j)·C' + c goes to row i, column j of block c."""
    return node.op(
        "DepthToSpace", [node.x("x")], {"blocksize": int(node.scalar("block_size")), "mode": "DCR"}
    )


@rule("space_to_depth")
def space_to_depth(node: Node) -> list:
    return node.op("SpaceToDepth", [node.x("x")], {"blocksize": int(node.scalar("block_size"))})


@rule("pixel_shuffle")
def pixel_shuffle(node: Node) -> list:
    """PyTorch's: channel c·f² + i·f + j (ONNX's CRD)."""
    return node.op(
        "DepthToSpace", [node.x("x")], {"blocksize": int(node.scalar("upscale_factor")), "mode": "CRD"}
    )


@rule("pixel_unshuffle", since="iOS16")
def pixel_unshuffle(node: Node) -> list:
    """PyTorch's: [n, C, H·f, W·f] → [n, C·f², H, W], block (i, j) of channel c to c·f² + i·f + j."""
    f = int(node.scalar("downscale_factor"))
    c, h, w = _static_dims(node, "x", [1, 2, 3])
    y = node.one("Reshape", [node.x("x"), node.int64s([0, c, h // f, f, w // f, f])])
    y = node.one("Transpose", [y], {"perm": [0, 1, 3, 5, 2, 4]})
    return node.op("Reshape", [y, node.int64s([0, c * f * f, h // f, w // f])])


@rule("space_to_batch")
def space_to_batch(node: Node) -> list:
    """tf.space_to_batch_nd on H, W: pad, then block offset (i, j) of image b → batch (i·bw + j)·n + b."""
    bh, bw = node.ints("block_shape")
    p = node.ints("paddings")
    c, h, w = _static_dims(node, "x", [1, 2, 3])
    x = node.x("x")
    if any(p):
        x = node.one("Pad", [x, node.int64s([0, 0, p[0], p[2], 0, 0, p[1], p[3]])])
    h, w = h + p[0] + p[1], w + p[2] + p[3]
    y = node.one("Reshape", [x, node.int64s([-1, c, h // bh, bh, w // bw, bw])])
    y = node.one("Transpose", [y], {"perm": [3, 5, 0, 1, 2, 4]})
    return node.op("Reshape", [y, node.int64s([-1, c, h // bh, w // bw])])


@rule("batch_to_space")
def batch_to_space(node: Node) -> list:
    """The inverse of space_to_batch: batch (i·bw + j)·n + b → block offset (i, j) of image b, then crop."""
    bh, bw = node.ints("block_shape")
    cr = node.ints("crops")
    c, h, w = _static_dims(node, "x", [1, 2, 3])
    y = node.one("Reshape", [node.x("x"), node.int64s([bh, bw, -1, c, h, w])])
    y = node.one("Transpose", [y], {"perm": [2, 3, 4, 0, 5, 1]})
    y = node.one("Reshape", [y, node.int64s([-1, c, h * bh, w * bw])])
    if not any(cr):
        return [y]
    starts = [cr[0], cr[2]]
    ends = [h * bh - cr[1], w * bw - cr[3]]
    return node.op("Slice", [y, node.int64s(starts), node.int64s(ends), node.int64s([2, 3])])


# ---------------------------------------------------------------------------------------------
# Resizing: the sample positions of each output row / column are computed at load time (MIL's
# sampling modes are exact that way), then read with Gather and blended.


def _grid(mode: str, n_in: int, n_out: int) -> np.ndarray:
    """resize_bilinear's grid points (its docstring's formulas), clamped to [0, n_in - 1]."""
    i = np.arange(n_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if n_out == 1:
            g = np.full(1, (n_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0)
        else:
            g = i * (n_in - 1) / (n_out - 1)
    elif mode == "DEFAULT":
        g = i * ((n_in - n_in / n_out) / (n_out - 1) if n_out > 1 else 0.0)
    elif mode == "OFFSET_CORNERS":
        delta = max(1, n_in - 1) / n_out
        g = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        spacing = n_in / n_out
        g = i * spacing + 0.5 * spacing - 0.5
    else:
        raise ValueError(mode)
    return np.clip(g, 0, n_in - 1)


def _along(node: Node, x: Value, axis: int, rank: int, idx: np.ndarray) -> Value:
    return node.one("Gather", [x, node.imp.const(idx.astype(np.int64))], {"axis": axis})


def _linear_axis(node: Node, x: Value, axis: int, rank: int, g: np.ndarray, n_in: int) -> Value:
    """Linear interpolation of ``x`` along ``axis`` at the positions ``g``."""
    lo = np.floor(g).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    w = g - lo
    if len(g) == n_in and not w.any() and (lo == np.arange(n_in)).all():
        return x
    a = _along(node, x, axis, rank, lo)
    if not w.any():
        return a
    b = _along(node, x, axis, rank, hi)
    shape = [len(g)] + [1] * (rank - 1 - axis)
    wv = node.imp.const(w.reshape(shape).astype(node.dtype("x").numpy))
    return node.one("Add", [a, node.one("Mul", [node.one("Sub", [b, a]), wv])])


def _nearest_axis(node: Node, x: Value, axis: int, rank: int, idx: np.ndarray, n_in: int) -> Value:
    idx = np.clip(idx, 0, n_in - 1)
    if len(idx) == n_in and (idx == np.arange(n_in)).all():
        return x
    return _along(node, x, axis, rank, idx)


def _resize(node: Node, sizes: list[int], linear: bool, mode: str | None, scales=None) -> list:
    """Resize the last len(sizes) axes of x to ``sizes``: linear with ``mode``'s grid, or nearest
    (source floor(i·in/out), or floor(i/scale) when ``scales`` are given)."""
    rank = node.rank("x")
    if linear and node.dtype("x") not in FLOATS:
        raise node.unsupported(f"linear resizing of {node.dtype('x').name} values")
    axes = list(range(rank - len(sizes), rank))
    dims = _static_dims(node, "x", axes)
    y = node.x("x")
    for k, (axis, n_in, n_out) in enumerate(zip(axes, dims, sizes)):
        if linear:
            y = _linear_axis(node, y, axis, rank, _grid(mode, n_in, n_out), n_in)
        else:
            i = np.arange(n_out, dtype=np.float64)
            # (a scale given in fp32 for out / in may fall a hair short of it: the 1e-6 keeps
            # i / scale on the integer it stands for)
            src = np.floor(i / scales[k] * (1 + 1e-6)) if scales is not None else np.floor(i * n_in / n_out)
            y = _nearest_axis(node, y, axis, rank, src.astype(np.int64), n_in)
    return [y] if y is not node.x("x") else node.op("Identity", [y])


def _scaled_sizes(node: Node) -> tuple[list[int], list[float]]:
    scales = [float(node.scalar("scale_factor_height", 1)), float(node.scalar("scale_factor_width", 1))]
    dims = _static_dims(node, "x", [-2, -1])
    return [int(np.floor(d * s)) for d, s in zip(dims, scales)], scales


@rule("upsample_nearest_neighbor")
def upsample_nearest_neighbor(node: Node) -> list:
    """Output H·s, W·s (floored); output row i reads row floor(i / s)."""
    sizes, scales = _scaled_sizes(node)
    return _resize(node, sizes, False, None, scales)


@rule("resize_nearest_neighbor")
def resize_nearest_neighbor(node: Node) -> list:
    """Output row i reads row floor(i · H_in / H_out)."""
    sizes = [int(node.scalar("target_size_height")), int(node.scalar("target_size_width"))]
    return _resize(node, sizes, False, None)


@rule("upsample_bilinear")
def upsample_bilinear(node: Node) -> list:
    """align_corners: STRICT_ALIGN_CORNERS's grid; otherwise half-pixel (UNALIGN_CORNERS), or
    DEFAULT's with half_pixel_centers=False (iOS16); the scale recomputed from the output size."""
    sizes, _ = _scaled_sizes(node)
    align = bool(node.scalar("align_corners", True))
    half = bool(node.scalar("half_pixel_centers", not align))
    if align and half:
        raise node.unsupported("upsample_bilinear with align_corners and half_pixel_centers")
    mode = "STRICT_ALIGN_CORNERS" if align else "UNALIGN_CORNERS" if half else "DEFAULT"
    return _resize(node, sizes, True, mode)


@rule("resize_bilinear")
def resize_bilinear(node: Node) -> list:
    sizes = [int(node.scalar("target_size_height", 1)), int(node.scalar("target_size_width", 1))]
    mode = str(node.scalar("sampling_mode", "DEFAULT"))
    if mode not in ("DEFAULT", "STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "OFFSET_CORNERS", "UNALIGN_CORNERS"):
        raise node.unsupported(f"sampling_mode '{mode}'")
    return _resize(node, sizes, True, mode)


@rule("resize", since="iOS17")
def resize(node: Node) -> list:
    """The last ``resized_dims`` axes to the declared (static) output sizes; LINEAR with any
    sampling mode, NEAREST_NEIGHBOR with DEFAULT's (row floor(i · in / out))."""
    n = int(node.scalar("resized_dims"))
    out = node.out().shape
    if out is None or not all(isinstance(d, int) for d in out[len(out) - n :]):
        raise node.unsupported("resize to sizes known only when the model runs")
    interp = str(node.scalar("interpolation_mode", "LINEAR"))
    mode = str(node.scalar("sampling_mode", "DEFAULT"))
    if mode not in ("DEFAULT", "STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "OFFSET_CORNERS", "UNALIGN_CORNERS"):
        raise node.unsupported(f"sampling_mode '{mode}'")
    if interp == "NEAREST_NEIGHBOR" and mode != "DEFAULT":
        raise node.unsupported(f"NEAREST_NEIGHBOR resize with sampling_mode '{mode}'")
    if interp not in ("LINEAR", "NEAREST_NEIGHBOR"):
        raise node.unsupported(f"interpolation_mode '{interp}'")
    return _resize(node, list(out[len(out) - n :]), interp == "LINEAR", mode)


@rule("crop_resize")
def crop_resize(node: Node) -> list:
    """tf.image.crop_and_resize, NCHW: each box sampled bilinearly at target_height × target_width
    points from its first to its last corner (ALIGN_CORNERS; a single point at the box's center,
    STRICT_ALIGN_CORNERS: its first corner); points outside the image give pad_value (iOS16, 0
    before). iOS15/16 take ``roi`` [N, 1, 4 or 5, 1, 1] (5: the image index first; 4: every image,
    output [N, B, C, h, w]); iOS17 ``boxes`` [N, 4] and ``box_indices``, output [N, C, h, w]."""
    mode = str(node.scalar("sampling_mode", "DEFAULT"))
    if mode not in ("ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"):
        raise node.unsupported(f"crop_resize sampling_mode '{mode}'")
    coords = str(node.scalar("box_coordinate_mode", "CORNERS_HEIGHT_FIRST"))
    if coords not in ("CORNERS_HEIGHT_FIRST", "CORNERS_WIDTH_FIRST"):
        raise node.unsupported(f"crop_resize box_coordinate_mode '{coords}'")
    th, tw = int(node.scalar("target_height", 1)), int(node.scalar("target_width", 1))
    b, c, h, w = _static_dims(node, "x", [0, 1, 2, 3])
    t = node.dtype("x")
    x = node.x("x")
    if node.has("roi"):  # iOS15 / iOS16
        width = _static_dims(node, "roi", [2])[0]
        roi = node.one("Reshape", [node.x("roi"), node.int64s([-1, width])])
        if width == 5:
            if b != 1:  # MIL's docs give [N, 1, C, h, w], coremltools declares [N, B, C, h, w]
                raise node.unsupported("crop_resize with an image index in roi on a batch of several images")
            boxes = node.one("Slice", [roi, node.int64s([1]), node.int64s([5]), node.int64s([1])])
            first = node.one("Slice", [roi, node.int64s([0]), node.int64s([1]), node.int64s([1])])
            index = node.cast(node.one("Reshape", [first, node.int64s([-1])]), DataType.INT64)
        elif width == 4:  # every box on every image: N·B crops
            boxes = node.one("Reshape", [node.one("Tile", [roi, node.int64s([1, b])]), node.int64s([-1, 4])])
            n = node.one("Shape", [roi], {"start": 0, "end": 1})
            index = node.one("Tile", [node.int64s(np.arange(b)), n])
        else:
            raise node.fail(f"roi has {width} values per box, not 4 or 5")
    else:  # iOS17
        boxes = node.x("boxes")
        if node.has("box_indices"):
            index = _int64(node, "box_indices")
        else:
            n = node.one("Shape", [boxes], {"start": 0, "end": 1})
            index = node.one("Range", [node.int64s(0), node.one("Squeeze", [n]), node.int64s(1)])
    if node.dtype("roi" if node.has("roi") else "boxes") != t:
        boxes = node.cast(boxes, t)
    order = [0, 1, 2, 3] if coords == "CORNERS_HEIGHT_FIRST" else [1, 0, 3, 2]
    y1, x1, y2, x2 = (
        node.one("Gather", [boxes, node.int64s([k])], {"axis": 1}) for k in order
    )  # [N, 1] each
    scale = float(node.scalar("spatial_scale", 1.0))
    normalized = bool(node.scalar("normalized_coordinates", False))
    pad_value = node.scalar("pad_value", 0.0)
    image = node.one("Gather", [x, index], {"axis": 0})  # [N, C, H, W]

    def positions(lo: Value, hi: Value, size: int, n_out: int) -> Value:
        """[N, n_out] sample positions, in pixels, from ``lo`` to ``hi``."""
        f = scale * ((size - 1) if normalized else 1)
        if n_out > 1:
            frac = np.arange(n_out) / (n_out - 1)
        else:
            frac = np.asarray([0.5 if mode == "ALIGN_CORNERS" else 0.0])
        lo, hi = (node.one("Mul", [v, node.full(f, t)]) for v in (lo, hi))
        span = node.one("Sub", [hi, lo])
        return node.one("Add", [lo, node.one("Mul", [span, node.imp.const(frac[None, :].astype(t.numpy))])])

    def sample(v: Value, pos: Value, size: int, axis: int, shape: list) -> tuple[Value, Value]:
        """Linear interpolation of ``v`` along ``axis`` at the [N, n] positions ``pos``, reshaped
        to ``shape`` (N, C, …), and the positions' inside-the-image mask."""
        lo = node.one("Floor", [pos])
        frac = node.one("Sub", [pos, lo])
        clip = [node.full(0, t), node.full(size - 1, t)]
        i0 = node.cast(node.one("Clip", [lo, *clip]), DataType.INT64)
        i1 = node.cast(node.one("Clip", [node.one("Add", [lo, node.full(1, t)]), *clip]), DataType.INT64)
        full = node.one(
            "Concat",
            [node.one("Shape", [v], {"start": 0, "end": axis}), node.int64s([shape[axis]]),
             node.one("Shape", [v], {"start": axis + 1})],
            {"axis": 0},
        )  # fmt: skip
        at = [node.one("Expand", [node.one("Reshape", [i, node.int64s(shape)]), full]) for i in (i0, i1)]
        a, c = (node.one("GatherElements", [v, i], {"axis": axis}) for i in at)
        frac = node.one("Reshape", [frac, node.int64s(shape)])
        y = node.one("Add", [a, node.one("Mul", [node.one("Sub", [c, a]), frac])])
        inside = node.one(
            "And",
            [
                node.one("GreaterOrEqual", [pos, node.full(0, t)]),
                node.one("LessOrEqual", [pos, node.full(size - 1, t)]),
            ],
        )
        return y, node.one("Reshape", [inside, node.int64s(shape)])

    rows, in_y = sample(image, positions(y1, y2, h, th), h, 2, [-1, 1, th, 1])
    out, in_x = sample(rows, positions(x1, x2, w, tw), w, 3, [-1, 1, 1, tw])
    y = node.one("Where", [node.one("And", [in_y, in_x]), out, node.full(pad_value, t)])
    if node.has("roi"):
        y = node.one("Reshape", [y, node.int64s([-1, 1 if width == 5 else b, c, th, tw])])
    return [y]
