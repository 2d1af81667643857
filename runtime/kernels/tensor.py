"""Shape and layout kernels: reshaping, joining, slicing, padding, tiling and resizing tensors."""

from __future__ import annotations

import functools
import math

import numpy as np

from offload.errors import ShapeError
from offload.ir import DataType

from . import kernel, prepared, prepared_outputs
from ._util import check_result, normalize_axes, normalize_axis, out_for, unsupported


def _ints(a) -> list[int]:
    """A shape-like input (int tensor) as a list of Python ints."""
    return [int(v) for v in np.asarray(a).reshape(-1)]


def _scalar(a):
    """A scalar input's value; a one-element tensor of any rank counts as a scalar."""
    return np.asarray(a).reshape(-1)[0]


def _absent(a) -> bool:
    """An omitted optional input, or one given as an empty tensor (ONNX allows both)."""
    return a is None or np.asarray(a).size == 0


# ---- reshaping -----------------------------------------------------------------------------


@kernel("Reshape")
def reshape(ctx, data, shape, *, allowzero):
    dims = _ints(shape)
    if not allowzero:
        # A 0 copies the input's dimension at the same position.
        dims = [data.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return _reshaped(ctx, data, dims)


def _reshaped(ctx, data, dims):
    """``data`` reshaped to ``dims``: a view where one exists (np.reshape's result, which later
    ops read in its layout: a MatMul of a strided view rounds differently from one of a copy).
    Where np.reshape would copy (a transposed view), the one copy goes straight into the planned
    output when it has the result's shape, not into a new array the method copies again."""
    if data.flags.c_contiguous:
        return np.reshape(data, dims)
    try:
        return np.reshape(data, dims, copy=False)
    except TypeError:  # numpy before 2.1: no copy argument
        return np.reshape(data, dims)
    except ValueError:  # a copy is needed, or dims do not fit (np.reshape below names that)
        out = out_for(ctx, 0, _resolved(dims, data.size), data.dtype)
    if out is None or out.size != data.size:
        return np.reshape(data, dims)
    np.copyto(out.reshape(data.shape), data)
    return out


def _resolved(dims, size: int) -> tuple[int, ...]:
    """``dims`` with its one -1 (if any) worked out for ``size`` elements; not checked."""
    dims = [int(d) for d in dims]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = size // known if known else 0
    return tuple(dims)


@kernel("Flatten")
def flatten(ctx, input, *, axis):
    rank = input.ndim
    if not -rank <= axis <= rank:
        raise unsupported("Flatten", f"axis {axis} for rank {rank}")
    if axis < 0:
        axis += rank
    return np.reshape(input, (math.prod(input.shape[:axis]), math.prod(input.shape[axis:])))


@kernel("Squeeze")
def squeeze(ctx, data, axes=None):
    if _absent(axes):
        return np.squeeze(data)
    return np.squeeze(data, axis=normalize_axes(axes, data.ndim, "Squeeze"))


@kernel("Unsqueeze")
def unsqueeze(ctx, data, axes):
    # Axes refer to the output, whose rank counts the new dimensions too.
    out_axes = normalize_axes(axes, data.ndim + np.asarray(axes).size, "Unsqueeze")
    return np.expand_dims(data, axis=out_axes)


@kernel("Transpose")
def transpose(ctx, data, *, perm):
    return np.transpose(data, None if perm is None else [int(p) for p in perm])


@kernel("Expand")
def expand(ctx, input, shape):
    target = tuple(_ints(shape))
    if target == input.shape:  # a copy (a decoder's row at every trip): no broadcast to work out
        return input.copy()
    out_shape = np.broadcast_shapes(input.shape, target)
    check_result(out_shape, input.dtype, "Expand")
    return np.array(np.broadcast_to(input, out_shape))


@kernel("Tile")
def tile(ctx, input, repeats):
    reps = _ints(repeats)
    if len(reps) != input.ndim:
        raise ShapeError(f"Tile: {len(reps)} repeats for an input of rank {input.ndim}")
    shape = check_result([d * r for d, r in zip(input.shape, reps)], input.dtype, "Tile")
    if math.prod(shape) == 0:  # np.tile would still repeat the non-empty axes first
        return np.empty(shape, input.dtype)
    if all(d == 1 or r == 1 for d, r in zip(input.shape, reps)):
        # only axes of length 1 repeated: np.tile's copies are the input broadcast to the shape
        # (a decoder's step index spread over a row at every trip, 3x faster than np.tile)
        out = np.empty(shape, input.dtype)
        out[...] = input
        return out
    return np.tile(input, reps)


@kernel("DepthToSpace")
def depth_to_space(ctx, input, *, blocksize, mode):
    b, c, h, w = input.shape
    bs = blocksize
    if mode == "DCR":
        x = input.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        x = input.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise unsupported("DepthToSpace", f"mode '{mode}'")
    return x.reshape(b, c // (bs * bs), h * bs, w * bs)


@kernel("SpaceToDepth")
def space_to_depth(ctx, input, *, blocksize, mode):
    b, c, h, w = input.shape
    bs = blocksize
    x = input.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        x = x.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        x = x.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise unsupported("SpaceToDepth", f"mode '{mode}'")
    return x.reshape(b, c * bs * bs, h // bs, w // bs)


# ---- shape queries and generators --------------------------------------------------------------


@kernel("Shape")
def shape(ctx, data, *, end, start):
    # Python slicing clamps out-of-range (and negative) bounds exactly as the spec asks.
    dims = data.shape[start:end]
    out = out_for(ctx, 0, (len(dims),), np.dtype(np.int64))
    if out is None:
        return np.array(dims, dtype=np.int64)
    out[:] = dims
    return out


@prepared("Shape")
def _shape_call(attrs, inputs, output):
    """Shape into the arena view: the dims of the input's shape, whatever its layout."""
    if len(inputs) != 1 or inputs[0] is None or output is None or output[0] != np.int64:
        return None
    if (len(tuple(inputs[0][1])[attrs["start"] : attrs["end"]]),) != tuple(output[1]):
        return None
    return _ShapeCall(attrs["start"], attrs["end"])


class _ShapeCall:
    __slots__ = ("end", "start")
    any_layout = True

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __call__(self, out, x):
        dims = x.shape[self.start : self.end]
        if len(dims) != len(out):
            raise TypeError("not the declared rank")
        out[:] = dims


@kernel("Size")
def size(ctx, data):
    return np.array(np.asarray(data).size, dtype=np.int64)


@kernel("ConstantOfShape")
def constant_of_shape(ctx, input, *, value):
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value)
    shape = check_result(_ints(input), fill.dtype, "ConstantOfShape")
    out = out_for(ctx, 0, shape, fill.dtype)
    if out is None:
        return np.full(shape, _scalar(fill), dtype=fill.dtype)
    out.fill(_scalar(fill))
    return out


@kernel("Range")
def range_(ctx, start, limit, delta, *, stash_type):
    dtype = np.asarray(start).dtype
    if dtype.kind in "iu":
        s, l, d = (int(_scalar(v)) for v in (start, limit, delta))
        n = max(-((s - l) // d), 0)  # ceil((l - s) / d) in exact integer arithmetic
        check_result((n,), np.int64, "Range")
        return (s + d * np.arange(n, dtype=np.int64)).astype(dtype)
    s, l, d = (float(_scalar(v)) for v in (start, limit, delta))
    n = max(math.ceil((l - s) / d), 0)
    check_result((n,), np.float64, "Range")
    # Half-precision types count in the stash type so that large ranges stay exact.
    work = DataType(stash_type).numpy if dtype.itemsize < 4 else dtype
    i = np.arange(n).astype(work)
    return (work.type(s) + i * work.type(d)).astype(dtype)


@kernel("EyeLike")
def eye_like(ctx, input, *, dtype, k):
    out = input.dtype if dtype is None else DataType(dtype).numpy
    rows, cols = check_result(input.shape, out, "EyeLike")
    return np.eye(rows, cols, k=k, dtype=out)


@kernel("Trilu")
def trilu(ctx, input, k=None, *, upper):
    offset = 0 if _absent(k) else int(_scalar(k))
    return np.triu(input, offset) if upper else np.tril(input, offset)


# ---- joining and splitting -------------------------------------------------------------------


@kernel("Concat")
def concat(ctx, *inputs, axis):
    axis = normalize_axis(axis, inputs[0].ndim, "Concat")
    out = None
    if all(x.dtype == inputs[0].dtype and x.ndim == inputs[0].ndim for x in inputs):
        shape = list(inputs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in inputs)
        out = out_for(ctx, 0, shape, inputs[0].dtype)
    return np.concatenate(inputs, axis=axis, out=out)


@kernel("Split")
def split(ctx, input, split=None, *, axis, num_outputs):
    axis = normalize_axis(axis, input.ndim, "Split")
    dim = input.shape[axis]
    if not _absent(split):
        sizes = _ints(split)
    else:
        # Equal chunks of ceil(dim / n); the last one takes what is left.
        n = num_outputs or ctx.num_outputs
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    if sum(sizes) != dim:
        raise unsupported("Split", f"split sizes {sizes} for a dimension of {dim}")
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(input, bounds, axis=axis))


@prepared_outputs("Split")
def _split_prepared(attrs, inputs, outputs):
    if not inputs or inputs[0] is None or inputs[0][0].kind == "O":
        return None
    rank = len(inputs[0][1])
    if not -rank <= int(attrs["axis"]) < rank:
        return None
    return _SplitCall(int(attrs["axis"]) % rank, attrs["num_outputs"], len(outputs))


class _SplitCall:
    """Split's pieces copied into their arena views: in a .pte run the kernel's pieces, views of
    an input in the arena, are copied out of it anyway (``Module._detach``), as C-contiguous
    arrays of the same values. The sizes are read at each call (a constant, or the kernel's
    error where they do not add up)."""

    __slots__ = ("axis", "count", "n_outputs")

    def __init__(self, axis: int, count, n_outputs: int):
        self.axis, self.count, self.n_outputs = axis, count, n_outputs

    def __call__(self, outs, x, split=None):
        sizes = self._sizes(x, split, outs)
        if sizes is None:
            raise ValueError("the kernel's error")
        for out, piece in self._pieces(outs, x, sizes):
            np.copyto(out, piece)
        return tuple(outs)

    def _sizes(self, x, split, outs) -> list[int] | None:
        """The pieces' sizes along the axis; None where they do not fit ``x`` and ``outs``."""
        dim = x.shape[self.axis]
        if split is not None and split.size:
            sizes = split.reshape(-1).tolist()
        else:
            n = self.count or self.n_outputs
            chunk = -(-dim // n)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
        return sizes if sum(sizes) == dim and len(sizes) == len(outs) else None

    def _pieces(self, outs, x, sizes) -> list:
        """(output, the view of ``x`` it takes) for each wanted output."""
        lead = (slice(None),) * self.axis
        start, pairs = 0, []
        for size, out in zip(sizes, outs):
            if out is not None:
                piece = x[(*lead, slice(start, start + size))]
                if piece.shape != out.shape or piece.dtype != out.dtype:
                    raise TypeError("not the declared types")
                pairs.append((out, piece))
            start += size
        return pairs

    def bind(self, outs, x, split=None):
        """Bound with sizes that are a constant of the file (read-only) or computed from the
        declared shape, the views are taken once and each run is one copy per wanted output; sizes
        a run computes are read at each call. Returns the arena views, as the call does."""
        sizes = None if split is not None and split.flags.writeable else self._sizes(x, split, outs)
        if sizes is None:  # sizes of the run, or the kernel's error at the run
            return functools.partial(self, outs, x, split)
        return functools.partial(_copy_pieces, self._pieces(outs, x, sizes))


def _copy_pieces(pairs: list) -> None:
    """Each (destination, source) pair's copy: Split's pieces out of its input, Concat's inputs
    into their parts of its output."""
    for out, piece in pairs:
        np.copyto(out, piece)


# ---- slicing and padding ---------------------------------------------------------------------


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """The Python slice of ONNX Slice's (start, end, step) on a dimension, clamped as specified."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    # An end of -1 means "through index 0", which a Python slice spells as None.
    return slice(start, None if end < 0 else end, step)


def _slice_index(shape: tuple, starts, ends, axes=None, steps=None) -> tuple:
    """The numpy index of ONNX Slice's bounds on an array of ``shape``."""
    starts, ends = _ints(starts), _ints(ends)
    axes = range(len(starts)) if _absent(axes) else normalize_axes(axes, len(shape), "Slice")
    steps = [1] * len(starts) if _absent(steps) else _ints(steps)
    index = [slice(None)] * len(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise unsupported("Slice", "a step of 0")
        index[a] = _slice_bounds(s, e, st, shape[a])
    return tuple(index)


@prepared("Slice")
def _slice_prepared(attrs, inputs, output):
    if output is None or not inputs or inputs[0] is None or inputs[0][0] != output[0]:
        return None
    return _SliceCall()


class _SliceCall:
    """Slice into ``out``: the view its bounds select, copied. Bound with bounds that are
    constants of the file (read-only arrays: they cannot change between runs) the view is taken
    once and each run is one copy; bounds a run computes are read at each call."""

    __slots__ = ()

    def __call__(self, out, data, *bounds):
        np.copyto(out, data[_slice_index(data.shape, *bounds)], casting="no")

    def bind(self, out, data, *bounds):
        if any(b is None or b.flags.writeable for b in bounds):
            return functools.partial(self, out, data, *bounds)
        view = data[_slice_index(data.shape, *bounds)]
        if view.shape != out.shape or view.dtype != out.dtype:
            raise TypeError("not the declared type")
        return functools.partial(np.copyto, out, view)


@kernel("Slice")
def slice_(ctx, data, starts, ends, axes=None, steps=None):
    view = data[_slice_index(data.shape, starts, ends, axes, steps)]
    out = out_for(ctx, 0, view.shape, view.dtype)  # one copy, into the planned output if any
    if out is None:
        return view.copy()
    np.copyto(out, view)
    return out


_PAD_MODES = ("constant", "reflect", "edge", "wrap")  # the same names as numpy.pad's


def _pad_widths(data, pads, axes) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """(the input cropped by negative pads, the (before, after) padding of each axis)."""
    rank = data.ndim
    axes = range(rank) if _absent(axes) else normalize_axes(axes, rank, "Pad")
    p = _ints(pads)
    n = len(p) // 2
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = p[i], p[n + i]
    # Negative pads crop; what remains is padded by the positive ones.
    crop = tuple(slice(max(-b, 0), data.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(zip(before, after)))
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    return data[crop], width


@kernel("Pad")
def pad(ctx, data, pads, constant_value=None, axes=None, *, mode):
    if mode not in _PAD_MODES:
        raise unsupported("Pad", f"mode '{mode}'")
    x, width = _pad_widths(data, pads, axes)
    check_result([d + b + e for d, (b, e) in zip(x.shape, width)], data.dtype, "Pad")
    if mode == "constant":
        value = 0 if _absent(constant_value) else _scalar(constant_value)
        return np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(data.dtype))
    return np.pad(x, width, mode=mode)


@kernel("CenterCropPad")
def center_crop_pad(ctx, input_data, shape, *, axes):
    rank = input_data.ndim
    axes = range(rank) if axes is None else normalize_axes(axes, rank, "CenterCropPad")
    out_shape = list(input_data.shape)
    for a, target in zip(axes, _ints(shape)):
        out_shape[a] = target
    out = np.zeros(out_shape, dtype=input_data.dtype)
    src, dst = [], []
    for have, want in zip(input_data.shape, out_shape):
        # Crop windows start rounded down; odd padding puts the extra element at the end.
        lo = abs(have - want) // 2
        keep = min(have, want)
        src.append(slice(lo, lo + keep) if have > want else slice(0, keep))
        dst.append(slice(lo, lo + keep) if want > have else slice(0, keep))
    out[tuple(dst)] = input_data[tuple(src)]
    return out


@kernel("ReverseSequence")
def reverse_sequence(ctx, input, sequence_lens, *, batch_axis, time_axis):
    t_dim = input.shape[time_axis]
    lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1, 1)
    t = np.arange(t_dim).reshape(1, -1)
    # Per batch entry, the first len steps read back to front; the rest stay in place.
    src = np.where(t < lens, lens - 1 - t, t)  # (batch, time)
    if time_axis < batch_axis:
        src = src.T
    shape = [1] * input.ndim
    shape[batch_axis], shape[time_axis] = lens.shape[0], t_dim
    index = np.broadcast_to(src.reshape(shape), input.shape)
    return np.take_along_axis(input, index, axis=time_axis)


# ---- Resize ------------------------------------------------------------------------------------


def _source_coords(mode, out_len, width, in_len, scale, roi_lo, roi_hi):
    """Where each output position samples the input, for one axis (float64 coordinates).

    ``width`` is the output length before rounding to ``out_len`` (in_len * scale when
    scales are given); the modes that stretch corners to corners divide by it.
    """
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / width
        offset = in_len / 2 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if width != 1 else np.zeros(out_len)
    if mode == "align_corners":
        return x * (in_len - 1) / (width - 1) if width != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        if width != 1:
            return roi_lo * (in_len - 1) + x * (roi_hi - roi_lo) * (in_len - 1) / (width - 1)
        return np.full(out_len, 0.5 * (roi_lo + roi_hi) * (in_len - 1))
    raise unsupported("Resize", f"coordinate_transformation_mode '{mode}'")


_ROUNDINGS = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _linear_kernel(t):
    return np.maximum(1 - np.abs(t), 0)


def _cubic_kernel(a):
    """Keys' cubic convolution kernel with coefficient ``a`` (support [-2, 2])."""

    def k(t):
        t = np.abs(t)
        near = ((a + 2) * t - (a + 3)) * t * t + 1
        far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
        return np.where(t <= 1, near, np.where(t < 2, far, 0.0))

    return k


def _filter_weights(coords, in_len, kernel_fn, support, stretch, exclude_outside):
    """The (out, in) matrix of one axis's interpolation weights.

    Taps are the integer positions within ``support * stretch`` of each coordinate, weighted
    by the kernel at distance / stretch (stretch > 1 widens the filter for antialiasing).
    Taps outside the input are dropped (exclude_outside) or read the edge element.
    """
    reach = math.ceil(support * stretch)
    base = np.floor(coords)[:, None]
    taps = base + np.arange(-reach, reach + 2)[None, :]
    w = kernel_fn((taps - coords[:, None]) / stretch)
    if exclude_outside:
        w = np.where((taps >= 0) & (taps <= in_len - 1), w, 0.0)
    if stretch > 1 or exclude_outside:
        # Stretched or cut filters no longer sum to 1. A row with no tap left (far outside
        # the input, only with tf_crop_and_resize) stays 0 and is extrapolated later.
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    cols = np.clip(taps, 0, in_len - 1).astype(np.int64)
    rows = np.broadcast_to(np.arange(len(coords))[:, None], cols.shape)
    weights = np.zeros((len(coords), in_len))
    np.add.at(weights, (rows, cols), w)
    return weights


def _resize_axis(x, axis, coords, *, mode, nearest_mode, cubic_coeff_a, exclude_outside, stretch):
    """``x`` resampled along ``axis`` at the given input coordinates."""
    in_len = x.shape[axis]
    if mode == "nearest":
        return np.take(x, _nearest_index(coords, in_len, nearest_mode), axis=axis)
    if mode not in ("linear", "cubic"):
        raise unsupported("Resize", f"mode '{mode}'")
    cols, weights = _taps(
        (mode, coords.tobytes(), in_len, cubic_coeff_a, exclude_outside, stretch, x.dtype.char)
    )
    shape = [1] * x.ndim
    shape[axis] = len(coords)
    y = None
    for t in range(cols.shape[1]):  # the taps in ascending input position, as a dot product sums
        term = np.take(x, cols[:, t], axis=axis) * weights[:, t].reshape(shape)
        y = term if y is None else np.add(y, term, out=y)
    return y


def _nearest_index(coords, in_len: int, nearest_mode: str):
    """The input position each output of one axis copies in nearest mode."""
    if nearest_mode not in _ROUNDINGS:
        raise unsupported("Resize", f"nearest_mode '{nearest_mode}'")
    return np.clip(_ROUNDINGS[nearest_mode](coords), 0, in_len - 1).astype(np.int64)


@functools.lru_cache(maxsize=64)
def _taps(key):
    """One axis's interpolation as (columns, weights), each (out, taps): every output's nonzero
    weights of ``_filter_weights``' matrix and their input positions, ascending, rows with fewer
    taps padded with weight 0. A run reads ``taps`` inputs per output, not the whole axis."""
    mode, coords, in_len, cubic_coeff_a, exclude_outside, stretch, dtype = key
    coords = np.frombuffer(coords, dtype=np.float64)
    kernel_fn, support = (_linear_kernel, 1) if mode == "linear" else (_cubic_kernel(cubic_coeff_a), 2)
    dense = _filter_weights(coords, in_len, kernel_fn, support, stretch, exclude_outside)
    nonzero = dense != 0
    width = max(1, int(nonzero.sum(axis=1).max(initial=0)))
    cols = np.argsort(~nonzero, axis=1, kind="stable")[:, :width]
    weights = np.take_along_axis(dense, cols, axis=1).astype(dtype)
    cols.flags.writeable = weights.flags.writeable = False
    return cols, weights


def _resize_plan(X, roi, scales, sizes, axes, policy, crop):
    """Per resized axis: (axis, output length, unrounded output length, scale, roi start, roi end)."""
    rank = X.ndim
    axes = list(range(rank)) if axes is None else list(normalize_axes(axes, rank, "Resize"))
    n = len(axes)
    # Counts first: a hostile scales/roi input may hold millions of values, one per axis is read.
    for name, given, want in (
        ("roi", roi if crop else None, 2 * n),
        ("scales", scales, n),
        ("sizes", sizes, n),
    ):
        if not _absent(given) and np.size(given) != want:
            raise ShapeError(f"Resize: {np.size(given)} {name} values for {n} resized axes (expected {want})")
    r = [0.0] * n + [1.0] * n
    if crop and not _absent(roi):
        r = [float(v) for v in np.asarray(roi).reshape(-1)]
    lo, hi = r[:n], r[n:]
    in_lens = [X.shape[a] for a in axes]
    if not _absent(scales):
        sc = [float(s) for s in np.asarray(scales).reshape(-1)]
        # The roi does not shrink the output (as in ONNX's reference and onnxruntime).
        widths = [i * s for i, s in zip(in_lens, sc)]
        outs = [math.floor(w) for w in widths]
    elif not _absent(sizes):
        outs = _ints(sizes)
        if policy == "stretch":
            sc = [o / i for o, i in zip(outs, in_lens)]
            widths = [float(o) for o in outs]
        elif policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            s = pick(o / i for o, i in zip(outs, in_lens))
            sc = [s] * n
            widths = [s * i for i in in_lens]
            outs = [math.floor(w + 0.5) for w in widths]
        else:
            raise unsupported("Resize", f"keep_aspect_ratio_policy '{policy}'")
    else:
        raise unsupported("Resize", "a node with neither scales nor sizes")
    return list(zip(axes, outs, widths, sc, lo, hi))


def _resize_passes(shape, plan, mode: str, transformation: str, antialias) -> list:
    """Per resized axis that moves any element, in the plan's order: (axis, the input coordinate
    each output samples, the filter's stretch)."""
    passes = []
    for axis, out_len, width, scale, lo, hi in plan:
        in_len = shape[axis]
        coords = _source_coords(transformation, out_len, width, in_len, scale, lo, hi)
        if out_len == in_len and np.array_equal(coords, np.arange(in_len)):
            continue  # this axis keeps every element where it is
        passes.append((axis, coords, max(1.0, 1.0 / scale) if antialias and mode != "nearest" else 1.0))
    return passes


@kernel("Resize")
def resize(
    ctx,
    X,
    roi=None,
    scales=None,
    sizes=None,
    *,
    antialias,
    axes,
    coordinate_transformation_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    keep_aspect_ratio_policy,
    mode,
    nearest_mode,
):
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    plan = _resize_plan(X, roi, scales, sizes, axes, keep_aspect_ratio_policy, crop)
    final = list(X.shape)
    for axis, out_len, *_ in plan:
        final[axis] = out_len
    check_result(final, np.float64, "Resize")
    # float32 interpolates in float32 (as onnxruntime and LiteRT do); the rest in float64,
    # integers rounded back.
    y = X if mode == "nearest" or X.dtype == np.float32 else X.astype(np.float64)
    outside = np.zeros([1] * X.ndim, dtype=bool)
    for axis, coords, stretch in _resize_passes(
        X.shape, plan, mode, coordinate_transformation_mode, antialias
    ):
        in_len, out_len = X.shape[axis], len(coords)
        y = _resize_axis(
            y,
            axis,
            coords,
            mode=mode,
            nearest_mode=nearest_mode,
            cubic_coeff_a=cubic_coeff_a,
            exclude_outside=exclude_outside,
            stretch=stretch,
        )
        if crop:
            shape = [1] * X.ndim
            shape[axis] = out_len
            outside = outside | ((coords < 0) | (coords > in_len - 1)).reshape(shape)
    if crop:
        y = np.where(outside, extrapolation_value, y)
    if X.dtype.kind in "iu" and mode != "nearest":
        info = np.iinfo(X.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return np.asarray(y).astype(X.dtype)


# ---- prepared calls of data movement (kernels.prepared) -----------------------------------------
# The values the kernels return, copied once into the output's arena view: a reshape of a
# C-contiguous input is a view of it (and no copy at all where the memory plan put the output
# over the input: numpy skips a copy onto itself), a concat numpy's own concatenate into
# ``out``. Any dtype but Python objects; the output's type as the input's. Transpose has one only
# where it moves axes of size 1 alone (``_transpose_call``): elsewhere its kernel's result is a
# view, and a MatMul reading a transposed view takes another BLAS path than on a contiguous copy
# (other rounding), so a copy would change what evaluate computes.


def _moved(inputs, output) -> bool:
    first = inputs[0] if inputs else None
    return first is not None and output is not None and first[0] == output[0] and first[0].kind != "O"


@prepared("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape_call(attrs, inputs, output):
    if not _moved(inputs, output) or math.prod(inputs[0][1]) != math.prod(output[1]):
        return None
    return _ReshapeCall(tuple(output[1]))


class _ReshapeCall:
    """The input (C-contiguous, so that this is its reshape) as the declared output shape."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = shape

    def __call__(self, out, x, *shape_or_axes):
        np.copyto(out, x.reshape(self.shape), casting="no")

    def bind(self, out, x, *shape_or_axes):
        return functools.partial(np.copyto, out, x.reshape(self.shape))


@prepared("Identity", "Cast")
def _identity_call(attrs, inputs, output):
    # Identity, and Cast to the input's own type, return the input: its copy into the arena view
    if len(inputs) != 1 or inputs[0] is None or output is None or tuple(inputs[0][1]) != tuple(output[1]):
        return None
    if _moved(inputs, output):
        return _ReshapeCall(tuple(output[1]))
    if attrs.get("to") is not None and inputs[0][0] in _PLAIN_CAST and output[0] in _PLAIN_CAST:
        return _CastCall()
    return None


# Types a Cast between converts as numpy's astype does (``elementwise._cast``'s last case): the
# conversion np.copyto(casting="unsafe") makes too.
_PLAIN_CAST = frozenset(
    np.dtype(t)
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, np.float32, np.float64)
)  # fmt: skip


class _CastCall:
    """Cast between two ``_PLAIN_CAST`` types: the input converted into the arena view."""

    __slots__ = ()

    def __call__(self, out, x):
        if x.shape != out.shape:  # copyto would broadcast it
            raise TypeError("not the declared shape")
        np.copyto(out, x, casting="unsafe")

    def bind(self, out, x):
        return functools.partial(np.copyto, out, x, casting="unsafe")


@prepared("Transpose")
def _transpose_call(attrs, inputs, output):
    # A permutation that keeps the axes longer than 1 in their order (the exported recurrent
    # nets' [1, seq, n] ↔ [seq, 1, n] at batch 1) leaves every element where it is: the kernel's
    # view is C-contiguous and the method copied it into the arena view already; this is that
    # copy, as a reshape, without the kernel step.
    if not _moved(inputs, output):
        return None
    shape, rank = tuple(inputs[0][1]), len(inputs[0][1])
    perm = attrs.get("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)) or tuple(shape[p] for p in perm) != tuple(output[1]):
        return None
    if [p for p in perm if shape[p] != 1] != [a for a in range(rank) if shape[a] != 1]:
        # A real transpose of integers or booleans is copied into the arena view: the kernel's
        # strided view and the copy hold the same values, and whatever order a later kernel reads
        # integers in gives the same results (a float result keeps the kernel's view: a sum over
        # it adds in the view's order). int8 models transpose between every layout change.
        return _TransposeCall(tuple(perm)) if np.dtype(output[0]).kind in "biu" else None
    return _ReshapeCall(tuple(output[1]))


class _TransposeCall:
    """The input's axes permuted, copied into the output's view."""

    __slots__ = ("perm",)

    def __init__(self, perm: tuple):
        self.perm = perm

    def __call__(self, out, x):
        np.copyto(out, x.transpose(self.perm), casting="no")

    def bind(self, out, x):
        return functools.partial(np.copyto, out, x.transpose(self.perm))


@prepared("Concat")
def _concat_call(attrs, inputs, output):
    if not _moved(inputs, output) or not all(i is not None and i[0] == output[0] for i in inputs):
        return None
    rank = len(output[1])
    axis = int(attrs["axis"])
    if not -rank <= axis < rank or any(len(i[1]) != rank for i in inputs):
        return None
    return _ConcatCall(axis % rank)


class _ConcatCall:
    __slots__ = ("axis",)

    def __init__(self, axis):
        self.axis = axis

    def __call__(self, out, *xs):
        np.concatenate(xs, axis=self.axis, out=out, casting="no")

    def bind(self, out, *xs):
        """Bound, each input is copied into its part of out, a view taken once (0.6 us less a
        run than one concatenate of two small arrays); where an input shares out's memory or
        the parts do not fit, the concatenate."""
        axis, start, pairs = self.axis % out.ndim, 0, []
        for x in xs:
            if x.ndim != out.ndim or np.may_share_memory(x, out):
                pairs = None
                break
            part = out[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
            if part.shape != x.shape or x.dtype != out.dtype:
                pairs = None
                break
            pairs.append((part, x))
            start += x.shape[axis]
        if pairs is None or start != out.shape[axis]:
            return functools.partial(np.concatenate, xs, axis=self.axis, out=out, casting="no")
        return functools.partial(_copy_pieces, pairs)
