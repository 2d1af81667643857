"""Single-op cases: shapes and tensor movement — slices, gathers, scatters, pads, tiles, splits,
sorts, generated tensors, reversals, depth / space rearrangements, resizes (generate_ops.py;
needs coremltools). References follow MIL's op definitions (coremltools' docstrings)."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types
from generate_ops import Case

rng = np.random.default_rng(4321)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def ints(*values):
    return np.asarray(values, np.int32)


# ---- references written from MIL's definitions -------------------------------------------------


def scatter_ref(data, indices, updates, axis, mode):
    """MIL's scatter: slice i of ``updates`` along ``axis`` combines into slice indices[i]."""
    out = data.copy()
    ops = {
        "update": lambda a, u: u,
        "add": lambda a, u: a + u,
        "sub": lambda a, u: a - u,
        "mul": lambda a, u: a * u,
        "div": lambda a, u: a / u,
        "max": np.maximum,
        "min": np.minimum,
    }
    for i, k in enumerate(indices):
        dst = [slice(None)] * data.ndim
        src = [slice(None)] * data.ndim
        dst[axis], src[axis] = k, i
        out[tuple(dst)] = ops[mode](out[tuple(dst)], updates[tuple(src)])
    return out


def scatter_along_axis_ref(data, indices, updates, axis, mode):
    out = data.copy()
    for pos in np.ndindex(*indices.shape):
        dst = list(pos)
        dst[axis] = indices[pos]
        dst = tuple(dst)
        out[dst] = updates[pos] if mode == "update" else out[dst] + updates[pos]
    return out


def scatter_nd_ref(data, indices, updates, mode):
    out = data.copy()
    for pos in np.ndindex(*indices.shape[:-1]):
        dst = tuple(indices[pos])
        out[dst] = updates[pos] if mode == "update" else out[dst] + updates[pos]
    return out


def grid(mode, n_in, n_out):
    """resize_bilinear's grid points, straight from its docstring."""
    pts = []
    for i in range(n_out):
        if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
            if n_out == 1:
                g = (n_in - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0
            else:
                g = i * (n_in - 1) / (n_out - 1)
        elif mode == "DEFAULT":
            g = i * (n_in - n_in / n_out) / (n_out - 1) if n_out > 1 else 0.0
        elif mode == "OFFSET_CORNERS":
            delta = max(1, n_in - 1) / n_out
            g = 0.5 * delta + i * delta
        else:  # UNALIGN_CORNERS
            spacing = n_in / n_out
            g = i * spacing + 0.5 * spacing - 0.5
        pts.append(min(n_in - 1, max(0.0, g)))
    return pts


def bilinear_ref(x, oh, ow, mode):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (oh, ow), np.float64)
    for i, gy in enumerate(grid(mode, h, oh)):
        for j, gx in enumerate(grid(mode, w, ow)):
            y0, x0 = int(np.floor(gy)), int(np.floor(gx))
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            dy, dx = gy - y0, gx - x0
            out[..., i, j] = (
                x[..., y0, x0] * (1 - dy) * (1 - dx)
                + x[..., y0, x1] * (1 - dy) * dx
                + x[..., y1, x0] * dy * (1 - dx)
                + x[..., y1, x1] * dy * dx
            )
    return out.astype(x.dtype)


def nearest_ref(x, oh, ow):
    h, w = x.shape[-2:]
    rows = [min(h - 1, (i * h) // oh) for i in range(oh)]
    cols = [min(w - 1, (j * w) // ow) for j in range(ow)]
    return x[..., rows, :][..., cols]


def depth_to_space_ref(x, b):
    """TF's DepthToSpace in NCHW: out[n, c, h·b + i, w·b + j] = x[n, (i·b + j)·C' + c, h, w]."""
    n, c, h, w = x.shape
    cc = c // (b * b)
    out = np.zeros((n, cc, h * b, w * b), x.dtype)
    for i in range(b):
        for j in range(b):
            out[:, :, i::b, j::b] = x[:, (i * b + j) * cc : (i * b + j + 1) * cc]
    return out


def pixel_shuffle_ref(x, f):
    """PyTorch's PixelShuffle: out[n, c, h·f + i, w·f + j] = x[n, c·f² + i·f + j, h, w]."""
    n, c, h, w = x.shape
    cc = c // (f * f)
    out = np.zeros((n, cc, h * f, w * f), x.dtype)
    for c0 in range(cc):
        for i in range(f):
            for j in range(f):
                out[:, c0, i::f, j::f] = x[:, c0 * f * f + i * f + j]
    return out


def space_to_batch_ref(x, block, pads):
    """tf.space_to_batch_nd on H, W: batch (i·bw + j)·n + b holds rows i::bh, columns j::bw of the
    padded image b."""
    bh, bw = block
    xp = np.pad(x, ((0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])))
    n = x.shape[0]
    outs = [None] * (n * bh * bw)
    for i in range(bh):
        for j in range(bw):
            for b in range(n):
                outs[(i * bw + j) * n + b] = xp[b, :, i::bh, j::bw]
    return np.stack(outs)


def batch_to_space_ref(x, block, crops):
    bh, bw = block
    nb, c, h, w = x.shape
    n = nb // (bh * bw)
    out = np.zeros((n, c, h * bh, w * bw), x.dtype)
    for i in range(bh):
        for j in range(bw):
            for b in range(n):
                out[b, :, i::bh, j::bw] = x[(i * bw + j) * n + b]
    return out[:, :, crops[0][0] : h * bh - crops[0][1], crops[1][0] : w * bw - crops[1][1]]


def band_ref(x, lower, upper):
    m, n = np.indices(x.shape[-2:])
    keep = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    return np.where(keep, x, 0).astype(x.dtype)


def reverse_sequence_ref(x, lengths, seq_axis, batch_axis):
    out = x.copy()
    for b, n in enumerate(lengths):
        idx = [slice(None)] * x.ndim
        idx[batch_axis] = b
        src = list(idx)
        idx[seq_axis] = slice(0, n)
        src[seq_axis] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        out[tuple(idx)] = x[tuple(src)]
    return out


def topk_ref(x, k, axis, ascending):
    order = np.argsort(x if ascending else -x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int32)]


def crop_and_resize_ref(x, boxes, index, th, tw, mode="ALIGN_CORNERS", pad=0.0, scale=1.0, normalized=False):
    """tf.image.crop_and_resize in NCHW: boxes [y1, x1, y2, x2]; points outside the image get ``pad``."""
    _, c, h, w = x.shape
    out = np.zeros((len(boxes), c, th, tw), np.float64)
    fy, fx = scale * ((h - 1) if normalized else 1), scale * ((w - 1) if normalized else 1)
    for n, ((y1, x1, y2, x2), b) in enumerate(zip(boxes, index)):
        for i in range(th):
            t = i / (th - 1) if th > 1 else (0.5 if mode == "ALIGN_CORNERS" else 0.0)
            y = y1 * fy + (y2 - y1) * fy * t
            for j in range(tw):
                u = j / (tw - 1) if tw > 1 else (0.5 if mode == "ALIGN_CORNERS" else 0.0)
                xx = x1 * fx + (x2 - x1) * fx * u
                if not (0 <= y <= h - 1 and 0 <= xx <= w - 1):
                    out[n, :, i, j] = pad
                    continue
                top, left = int(np.floor(y)), int(np.floor(xx))
                bottom, right = min(top + 1, h - 1), min(left + 1, w - 1)
                dy, dx = y - top, xx - left
                img = x[b].astype(np.float64)
                upper = img[:, top, left] + (img[:, top, right] - img[:, top, left]) * dx
                lower = img[:, bottom, left] + (img[:, bottom, right] - img[:, bottom, left]) * dx
                out[n, :, i, j] = upper + (lower - upper) * dy
    return out.astype(x.dtype)


X345 = randn(3, 4, 5)
X46 = randn(4, 6)
IMG = randn(1, 8, 4, 6)
SMALL = randn(2, 3, 4, 5)

CASES = [
    # ---- slices
    Case(
        "t_slice_by_index_masks",
        {"x": X345},
        lambda x: mb.slice_by_index(
            x=x, begin=[1, 0, -1], end=[3, 4, 0], stride=[1, 2, -2],
            begin_mask=[False, True, False], end_mask=[False, False, True],
        ),
        lambda x: [x[1:3, :4:2, -1::-2]],
    ),
    Case(
        "t_slice_by_index_squeeze",
        {"x": X345},
        lambda x: mb.slice_by_index(
            x=x, begin=[0, -1, 1], end=[2, 0, 4], squeeze_mask=[False, True, False],
        ),
        lambda x: [x[0:2, -1, 1:4]],
    ),
    Case(
        "t_slice_by_index_neg_stride",
        {"x": X46},
        lambda x: mb.slice_by_index(x=x, begin=[3, 5], end=[0, 1], stride=[-1, -2], begin_mask=[True, False]),
        lambda x: [x[:0:-1, 5:1:-2]],
    ),
    Case(
        "t_slice_by_index_dynamic",
        {"x": X46, "b": ints(1, 2)},
        lambda x, b: mb.slice_by_index(x=x, begin=b, end=[3, 0], end_mask=[False, True]),
        lambda x, b: [x[1:3, 2:]],
    ),
    Case(
        "t_slice_by_size",
        {"x": X345},
        lambda x: mb.slice_by_size(x=x, begin=[1, 0, -3], size=[2, -1, 3]),
        lambda x: [x[1:3, :, 2:5]],
    ),
    Case(
        "t_slice_by_size_dynamic",
        {"x": X345, "b": ints(0, -3, -2)},
        lambda x, b: mb.slice_by_size(x=x, begin=b, size=[2, 3, -1]),
        lambda x, b: [x[0:2, 1:4, 3:]],
    ),
    Case(
        "t_crop",
        {"x": SMALL},
        lambda x: mb.crop(x=x, crop_height=[1, 0], crop_width=[1, 2]),
        lambda x: [x[:, :, 1:, 1:3]],
    ),
    Case(
        "t_slice_update",
        {"x": X345, "u": randn(2, 2)},
        lambda x, u: mb.slice_update(
            x=x, update=u, begin=[1, 0, -1], end=[3, 4, 0], stride=[1, 2, 1], squeeze_mask=[False, False, True]
        ),
        lambda x, u: [_set(x, u)],
        opset="iOS18",
    ),
    # ---- gathers
    Case(
        "t_gather_axis1",
        {"x": X345, "i": ints([0, -1, 2], [3, 1, 1])},
        lambda x, i: mb.gather(x=x, indices=i, axis=1),
        lambda x, i: [np.take(x, i, axis=1)],
    ),
    Case(
        "t_gather_int",
        {"x": np.arange(12, dtype=np.int32).reshape(3, 4), "i": ints(2, 0)},
        lambda x, i: mb.gather(x=x, indices=i, axis=-2),
        lambda x, i: [x[[2, 0]]],
    ),
    Case(
        "t_gather_batch_dims",
        {"x": randn(2, 4, 3), "i": ints([0, 3, -1, 1, 2], [2, -4, 0, 3, 1])},
        lambda x, i: mb.gather(x=x, indices=i, axis=1, batch_dims=1),
        lambda x, i: [np.stack([x[b][i[b]] for b in range(2)])],
        opset="iOS16",
    ),
    Case(
        "t_gather_along_axis",
        {"x": X46, "i": ints([0, 5], [1, 1], [5, 2], [3, 0])},
        lambda x, i: mb.gather_along_axis(x=x, indices=i, axis=-1),
        lambda x, i: [np.take_along_axis(x, i, axis=1)],
    ),
    Case(
        "t_gather_nd",
        {"x": X345, "i": ints([0, 1], [2, 3])},
        lambda x, i: mb.gather_nd(x=x, indices=i),
        lambda x, i: [np.stack([x[0, 1], x[2, 3]])],
    ),
    Case(
        "t_gather_nd_batch",
        {"x": randn(2, 3, 4), "i": ints([[1], [2]], [[0], [0]])},
        lambda x, i: mb.gather_nd(x=x, indices=i, batch_dims=1),
        lambda x, i: [np.stack([x[0][[1, 2]], x[1][[0, 0]]])],
        opset="iOS16",
    ),
    # ---- scatters
    Case(
        "t_scatter_update",
        {"d": randn(4, 3), "i": ints(2, 0), "u": randn(2, 3)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=0, mode="update"),
        lambda d, i, u: [scatter_ref(d, i, u, 0, "update")],
    ),
    Case(
        "t_scatter_add_dup",
        {"d": randn(2, 5), "i": ints(1, 3, 1), "u": randn(2, 3)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=1, mode="add"),
        lambda d, i, u: [scatter_ref(d, i, u, 1, "add")],
    ),
    Case(
        "t_scatter_sub",
        {"d": randn(2, 5), "i": ints(4, 0, 4), "u": randn(2, 3)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=-1, mode="sub"),
        lambda d, i, u: [scatter_ref(d, i, u, 1, "sub")],
    ),
    Case(
        "t_scatter_mul",
        {"d": randn(3, 2), "i": ints(0, 2), "u": randn(2, 2)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=0, mode="mul"),
        lambda d, i, u: [scatter_ref(d, i, u, 0, "mul")],
    ),
    Case(
        "t_scatter_div",
        {"d": randn(3, 2), "i": ints(1, 2), "u": randn(2, 2) + 3.0},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=0, mode="div"),
        lambda d, i, u: [scatter_ref(d, i, u, 0, "div")],
    ),
    Case(
        "t_scatter_max",
        {"d": randn(3, 4), "i": ints(1, 1, 0), "u": randn(3, 4)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=0, mode="max"),
        lambda d, i, u: [scatter_ref(d, i, u, 0, "max")],
    ),
    Case(
        "t_scatter_min",
        {"d": randn(3, 4), "i": ints(2, 2), "u": randn(3, 2)},
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=1, mode="min"),
        lambda d, i, u: [scatter_ref(d, i, u, 1, "min")],
    ),
    Case(
        "t_scatter_along_axis_add",
        {"d": randn(3, 4), "i": ints([0, 0], [3, 1], [2, 2]), "u": randn(3, 2)},
        lambda d, i, u: mb.scatter_along_axis(data=d, indices=i, updates=u, axis=1),
        lambda d, i, u: [scatter_along_axis_ref(d, i, u, 1, "add")],
    ),
    Case(
        "t_scatter_along_axis_update",
        {"d": randn(3, 4), "i": ints([2, 0, 1, 0], [1, 2, 0, 2]), "u": randn(2, 4)},
        lambda d, i, u: mb.scatter_along_axis(data=d, indices=i, updates=u, axis=0, mode="update"),
        lambda d, i, u: [scatter_along_axis_ref(d, i, u, 0, "update")],
    ),
    Case(
        "t_scatter_nd_add",
        {"d": randn(3, 4), "i": ints([0, 1], [2, 3], [0, 1]), "u": randn(3)},
        lambda d, i, u: mb.scatter_nd(data=d, indices=i, updates=u),
        lambda d, i, u: [scatter_nd_ref(d, i, u, "add")],
    ),
    Case(
        "t_scatter_nd_update_rows",
        {"d": randn(3, 4), "i": ints([2], [0]), "u": randn(2, 4)},
        lambda d, i, u: mb.scatter_nd(data=d, indices=i, updates=u, mode="update"),
        lambda d, i, u: [scatter_nd_ref(d, i, u, "update")],
    ),
    # ---- pads, tiles, splits, stacks
    Case(
        "t_pad_constant",
        {"x": X345},
        lambda x: mb.pad(x=x, pad=[1, 2], mode="constant", constant_val=1.5),
        lambda x: [np.pad(x, ((0, 0), (0, 0), (1, 2)), constant_values=1.5)],
    ),
    Case(
        "t_pad_reflect",
        {"x": X345},
        lambda x: mb.pad(x=x, pad=[1, 2, 2, 1], mode="reflect"),
        lambda x: [np.pad(x, ((0, 0), (1, 2), (2, 1)), mode="reflect")],
    ),
    Case(
        "t_pad_replicate",
        {"x": SMALL},
        lambda x: mb.pad(x=x, pad=[0, 0, 2, 1, 1, 3], mode="replicate"),
        lambda x: [np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 3)), mode="edge")],
    ),
    Case(
        "t_tile",
        {"x": randn(2, 3)},
        lambda x: mb.tile(x=x, reps=[2, 3]),
        lambda x: [np.tile(x, (2, 3))],
    ),
    Case(
        "t_split_num",
        {"x": X46},
        lambda x: mb.split(x=x, num_splits=3, axis=1),
        lambda x: np.split(x, 3, axis=1),
    ),
    Case(
        "t_split_sizes",
        {"x": X345},
        lambda x: mb.split(x=x, split_sizes=[1, 3, 1], axis=-1),
        lambda x: [x[..., :1], x[..., 1:4], x[..., 4:]],
    ),
    Case(
        "t_stack_neg",
        {"x": randn(2, 3), "y": randn(2, 3)},
        lambda x, y: mb.stack(values=(x, y), axis=-1),
        lambda x, y: [np.stack([x, y], axis=-1)],
    ),
    Case(
        "t_sliding_windows",
        {"x": randn(2, 9, 3)},
        lambda x: mb.sliding_windows(x=x, axis=1, size=4, stride=2),
        lambda x: [np.stack([x[:, k * 2 : k * 2 + 4] for k in range(3)], axis=1)],
    ),
    # ---- sorting, cumulative
    Case(
        "t_topk_desc",
        {"x": X345},
        lambda x: mb.topk(x=x, k=2, axis=1),
        lambda x: topk_ref(x, 2, 1, False),
    ),
    Case(
        "t_topk_ascending",
        {"x": X345},
        lambda x: mb.topk(x=x, k=3, axis=-1, ascending=True),
        lambda x: topk_ref(x, 3, -1, True),
    ),
    Case(
        "t_topk_values_only",
        {"x": X46},
        lambda x: mb.topk(x=x, k=2, axis=0, return_indices=False),
        lambda x: topk_ref(x, 2, 0, False)[:1],
        opset="iOS16",
    ),
    Case(
        "t_topk_all",
        {"x": X46},
        lambda x: mb.topk(x=x, k=6, axis=1, output_indices_dtype="int32"),
        lambda x: topk_ref(x, 6, 1, False),
        opset="iOS17",
    ),
    Case(
        "t_argsort",
        {"x": X345},
        lambda x: mb.argsort(x=x, axis=1),
        lambda x: [np.argsort(-x, axis=1, kind="stable").astype(np.int32)],
    ),
    Case(
        "t_argsort_ascending",
        {"x": X46},
        lambda x: mb.argsort(x=x, axis=-1, ascending=True),
        lambda x: [np.argsort(x, axis=-1, kind="stable").astype(np.int32)],
    ),
    Case(
        "t_cumsum",
        {"x": X345},
        lambda x: mb.cumsum(x=x, axis=1),
        lambda x: [np.cumsum(x, axis=1)],
    ),
    Case(
        "t_cumsum_exclusive_reverse",
        {"x": X345},
        lambda x: mb.cumsum(x=x, axis=-1, exclusive=True, reverse=True),
        lambda x: [np.flip(np.cumsum(np.flip(x, -1), axis=-1), -1) - x],
    ),
    # ---- generated tensors
    Case(
        "t_fill",
        {"s": ints(4, 6)},
        lambda s: mb.fill(shape=s, value=2.5),
        lambda s: [np.full((4, 6), 2.5, np.float32)],
    ),
    Case(
        "t_fill_like",
        {"x": X46},
        lambda x: mb.fill_like(ref_tensor=x, value=np.int32(7)),
        lambda x: [np.full((4, 6), 7, np.int32)],
        opset="iOS16",
    ),
    Case(
        "t_range_1d",
        {"n": ints(11)},
        lambda n: mb.range_1d(start=np.int32(2), end=mb.squeeze(x=n), step=np.int32(3)),
        lambda n: [np.arange(2, 11, 3, dtype=np.int32)],
    ),
    Case(
        "t_one_hot",
        {"i": ints([0, 3, 1], [4, 2, 2])},
        lambda i: mb.one_hot(indices=i, one_hot_vector_size=5, axis=1, on_value=2.0, off_value=-1.0),
        lambda i: [np.where(np.arange(5)[None, :, None] == i[:, None, :], 2.0, -1.0).astype(np.float32)],
    ),
    Case(
        "t_select",
        {"c": randn(3, 4), "a": randn(3, 4), "b": randn(4)},
        lambda c, a, b: mb.select(cond=mb.greater(x=c, y=0.0), a=a, b=b),
        lambda c, a, b: [np.where(c > 0, a, b)],
    ),
    Case(
        "t_band_part",
        {"x": randn(2, 4, 5)},
        lambda x: mb.band_part(x=x, lower=1, upper=0),
        lambda x: [band_ref(x, 1, 0)],
    ),
    Case(
        "t_band_part_upper",
        {"x": randn(5, 4)},
        lambda x: mb.band_part(x=x, lower=-1, upper=2),
        lambda x: [band_ref(x, -1, 2)],
    ),
    Case(
        "t_non_zero",
        {"x": np.asarray([[0, 1.5, 0], [2, 0, -1]], np.float32)},
        lambda x: mb.non_zero(x=x),
        lambda x: [np.argwhere(x != 0).astype(np.int32)],
    ),
    # ---- reversals
    Case(
        "t_reverse",
        {"x": X345},
        lambda x: mb.reverse(x=x, axes=[0, -1]),
        lambda x: [x[::-1, :, ::-1]],
    ),
    Case(
        "t_reverse_sequence",
        {"x": randn(4, 3, 2), "n": ints(1, 4, 2)},
        lambda x, n: mb.reverse_sequence(x=x, lengths=n, seq_axis=0, batch_axis=1),
        lambda x, n: [reverse_sequence_ref(x, n, 0, 1)],
    ),
    Case(
        "t_reverse_sequence_axes",
        {"x": X345, "n": ints(5, 0, 3, 2)},
        lambda x, n: mb.reverse_sequence(x=x, lengths=n, seq_axis=2, batch_axis=-2),
        lambda x, n: [reverse_sequence_ref(x, n, 2, 1)],
    ),
    # ---- depth / space / batch
    Case(
        "t_depth_to_space",
        {"x": IMG},
        lambda x: mb.depth_to_space(x=x, block_size=2),
        lambda x: [depth_to_space_ref(x, 2)],
    ),
    Case(
        "t_space_to_depth",
        {"x": depth_to_space_ref(IMG, 2)},
        lambda x: mb.space_to_depth(x=x, block_size=2),
        lambda x: [IMG],
    ),
    Case(
        "t_pixel_shuffle",
        {"x": IMG},
        lambda x: mb.pixel_shuffle(x=x, upscale_factor=2),
        lambda x: [pixel_shuffle_ref(x, 2)],
    ),
    Case(
        "t_pixel_unshuffle",
        {"x": pixel_shuffle_ref(IMG, 2)},
        lambda x: mb.pixel_unshuffle(x=x, downscale_factor=np.uint32(2)),
        lambda x: [IMG],
        opset="iOS16",
    ),
    Case(
        "t_space_to_batch",
        {"x": randn(2, 3, 4, 5)},
        lambda x: mb.space_to_batch(x=x, block_shape=[2, 3], paddings=[[1, 1], [0, 1]]),
        lambda x: [space_to_batch_ref(x, (2, 3), [[1, 1], [0, 1]])],
    ),
    Case(
        "t_batch_to_space",
        {"x": randn(12, 3, 3, 2)},
        lambda x: mb.batch_to_space(x=x, block_shape=[2, 3], crops=[[1, 1], [0, 2]]),
        lambda x: [batch_to_space_ref(x, (2, 3), [[1, 1], [0, 2]])],
    ),
    # ---- resizes
    Case(
        "t_upsample_nearest",
        {"x": SMALL},
        lambda x: mb.upsample_nearest_neighbor(x=x, scale_factor_height=2, scale_factor_width=3),
        lambda x: [x.repeat(2, axis=2).repeat(3, axis=3)],
    ),
    Case(
        "t_resize_nearest",
        {"x": SMALL},
        lambda x: mb.resize_nearest_neighbor(x=x, target_size_height=6, target_size_width=3),
        lambda x: [nearest_ref(x, 6, 3)],
    ),
    Case(
        "t_upsample_bilinear_align",
        {"x": SMALL},
        lambda x: mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=True),
        lambda x: [bilinear_ref(x, 8, 7, "STRICT_ALIGN_CORNERS")],
    ),
    Case(
        "t_upsample_bilinear_half",
        {"x": SMALL},
        lambda x: mb.upsample_bilinear(x=x, scale_factor_height=2, scale_factor_width=2, align_corners=False),
        lambda x: [bilinear_ref(x, 8, 10, "UNALIGN_CORNERS")],
    ),
    Case(
        "t_resize_bilinear_default",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(x=x, target_size_height=7, target_size_width=3),
        lambda x: [bilinear_ref(x, 7, 3, "DEFAULT")],
    ),
    Case(
        "t_resize_bilinear_strict",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(
            x=x, target_size_height=6, target_size_width=8, sampling_mode="STRICT_ALIGN_CORNERS"
        ),
        lambda x: [bilinear_ref(x, 6, 8, "STRICT_ALIGN_CORNERS")],
    ),
    Case(
        "t_resize_bilinear_align_one",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(x=x, target_size_height=1, target_size_width=9, sampling_mode="ALIGN_CORNERS"),
        lambda x: [bilinear_ref(x, 1, 9, "ALIGN_CORNERS")],
    ),
    Case(
        "t_resize_bilinear_offset",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(x=x, target_size_height=5, target_size_width=2, sampling_mode="OFFSET_CORNERS"),
        lambda x: [bilinear_ref(x, 5, 2, "OFFSET_CORNERS")],
    ),
    Case(
        "t_resize_bilinear_unalign",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(
            x=x, target_size_height=3, target_size_width=11, sampling_mode="UNALIGN_CORNERS"
        ),
        lambda x: [bilinear_ref(x, 3, 11, "UNALIGN_CORNERS")],
    ),
    Case(
        "t_resize_ios17",
        {"x": SMALL},
        lambda x: mb.resize(
            x=x, shape=np.asarray([6, 7], np.int32), resized_dims=np.uint32(2),
            interpolation_mode="LINEAR", sampling_mode="UNALIGN_CORNERS",
        ),
        lambda x: [bilinear_ref(x, 6, 7, "UNALIGN_CORNERS")],
        opset="iOS17",
    ),
    # ---- reshapes
    Case(
        "t_reshape_like",
        {"x": randn(2, 3, 4), "a": randn(2, 12), "b": randn(1, 3, 12)},
        lambda x, a, b: mb.reshape_like(
            x=x, ref_tensors=(a, b), begins=(0, 2), ends=(1, 0), end_masks=(False, True)
        ),
        lambda x, a, b: [x.reshape(2, 12)],
        opset="iOS16",
    ),
]  # fmt: skip


CASES += [
    Case(
        "t_range_1d_float",
        {"n": np.asarray([2.0], np.float32)},
        lambda n: mb.range_1d(start=-1.0, end=mb.squeeze(x=n), step=0.75),
        lambda n: [np.arange(-1.0, 2.0, 0.75).astype(np.float32)],
    ),
    Case(
        "t_topk_uint16",
        {"x": randn(3, 7)},
        lambda x: mb.topk(x=x, k=4, axis=-1, ascending=True, output_indices_dtype="uint16"),
        lambda x: [topk_ref(x, 4, -1, True)[0], topk_ref(x, 4, -1, True)[1].astype(np.uint16)],
        opset="iOS17",
    ),
    Case(
        "t_pad_dynamic",
        {"x": randn(2, 3), "p": ints(1, 0, 2, 3)},
        lambda x, p: mb.pad(x=x, pad=p, constant_val=-2.0),
        lambda x, p: [np.pad(x, ((1, 0), (2, 3)), constant_values=-2.0)],
    ),
    Case(
        "t_tile_dynamic",
        {"x": randn(2, 1, 3), "r": ints(1, 4, 2)},
        lambda x, r: mb.tile(x=x, reps=r),
        lambda x, r: [np.tile(x, (1, 4, 2))],
    ),
    Case(
        "t_resize_ios17_nearest",
        {"x": SMALL},
        lambda x: mb.resize(
            x=x, shape=np.asarray([2, 9, 2], np.int32), resized_dims=np.uint32(2),
            interpolation_mode="NEAREST_NEIGHBOR",
        ),
        lambda x: [nearest_ref(x, 9, 2)],
        opset="iOS17",
    ),
    Case(
        "t_upsample_bilinear_corner",
        {"x": SMALL},
        lambda x: mb.upsample_bilinear(
            x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False, half_pixel_centers=False
        ),
        lambda x: [bilinear_ref(x, 8, 7, "DEFAULT")],
        opset="iOS16",
    ),
    Case(
        "t_reverse_all",
        {"x": randn(2, 3)},
        lambda x: mb.reverse(x=x),
        lambda x: [x[::-1, ::-1]],
    ),
    Case(
        "t_band_part_int",
        {"x": np.arange(1, 21, dtype=np.int32).reshape(4, 5)},
        lambda x: mb.band_part(x=x, lower=0, upper=1),
        lambda x: [band_ref(x, 0, 1)],
    ),
    Case(
        "t_cumsum_int",
        {"x": np.arange(12, dtype=np.int32).reshape(3, 4)},
        lambda x: mb.cumsum(x=x, axis=0, exclusive=True),
        lambda x: [np.cumsum(x, axis=0) - x],
    ),
]  # fmt: skip


BOXES = np.asarray([[1, 0.5, 3, 4.5], [0, 1, 4, 5], [2.5, 2, 2.5, 5], [-1, 0, 2, 6.5]], np.float32)
CROP_X = randn(2, 3, 5, 6)
ROI5 = np.asarray([[0, 0.1, 0.2, 0.9, 0.7], [0, 0.6, 0.0, 0.2, 1.0]], np.float32).reshape(2, 1, 5, 1, 1)

CASES += [
    Case(
        "t_crop_resize_ios17",
        {"x": CROP_X, "boxes": BOXES, "i": ints(1, 0, 1, 0)},
        lambda x, boxes, i: mb.crop_resize(
            x=x, boxes=boxes, box_indices=i, target_height=3, target_width=4,
            sampling_mode="ALIGN_CORNERS", pad_value=0.5,
        ),
        lambda x, boxes, i: [crop_and_resize_ref(x, boxes, i, 3, 4, pad=0.5)],
        opset="iOS17",
    ),
    Case(
        "t_crop_resize_roi5",
        {"x": CROP_X[1:], "roi": ROI5},
        lambda x, roi: mb.crop_resize(
            x=x, roi=roi, target_height=1, target_width=2, normalized_coordinates=True,
            box_coordinate_mode="CORNERS_WIDTH_FIRST", sampling_mode="ALIGN_CORNERS",
        ),
        lambda x, roi: [
            crop_and_resize_ref(
                x, roi.reshape(2, 5)[:, [2, 1, 4, 3]], roi.reshape(2, 5)[:, 0].astype(int), 1, 2, normalized=True
            )[:, None]
        ],
    ),
    Case(
        "t_crop_resize_roi4",
        {"x": CROP_X, "roi": (BOXES * 2).reshape(4, 1, 4, 1, 1)},
        lambda x, roi: mb.crop_resize(
            x=x, roi=roi, target_height=2, target_width=3, spatial_scale=0.5,
            sampling_mode="STRICT_ALIGN_CORNERS", pad_value=-1.0,
        ),
        lambda x, roi: [
            np.stack([
                crop_and_resize_ref(x, np.repeat(BOXES[k : k + 1], 2, 0), [0, 1], 2, 3, "STRICT_ALIGN_CORNERS", -1.0)
                for k in range(4)
            ])
        ],
        opset="iOS16",
    ),
]  # fmt: skip


CASES += [
    Case(
        "t_resize_bilinear_fp16",
        {"x": SMALL},
        lambda x: mb.resize_bilinear(
            x=x, target_size_height=7, target_size_width=9, sampling_mode="UNALIGN_CORNERS"
        ),
        lambda x: [bilinear_ref(x, 7, 9, "UNALIGN_CORNERS")],
        fp16=True,
        tolerance=3e-3,
    ),
    Case(
        "t_pad_reflect_fp16",
        {"x": SMALL},
        lambda x: mb.pad(x=x, pad=[2, 1, 0, 3], mode="reflect"),
        lambda x: [np.pad(x, ((0, 0), (0, 0), (2, 1), (0, 3)), mode="reflect")],
        fp16=True,
        tolerance=1e-3,
    ),
    Case(
        "t_crop_resize_fp16",
        {"x": CROP_X, "boxes": BOXES[:3], "i": ints(1, 0, 1)},
        lambda x, boxes, i: mb.crop_resize(
            x=x, boxes=boxes, box_indices=i, target_height=4, target_width=3, sampling_mode="ALIGN_CORNERS"
        ),
        lambda x, boxes, i: [crop_and_resize_ref(x, boxes, i, 4, 3)],
        opset="iOS17",
        fp16=True,
        tolerance=3e-3,
    ),
]


CASES += [
    Case(
        "t_concat_interleave",
        {"x": randn(2, 3), "y": randn(2, 3), "z": randn(2, 3)},
        lambda x, y, z: mb.concat(values=(x, y, z), axis=-1, interleave=True),
        lambda x, y, z: [np.stack([x, y, z], axis=-1).reshape(2, 9)],
    ),
]


SEQ = get_new_symbol()  # a dimension of unknown size: the rules' paths for shapes known only at run time
DYN = {"x": mb.TensorSpec(shape=(SEQ, 5), dtype=types.fp32)}

CASES += [
    Case(
        "t_dyn_argsort",
        {"x": randn(4, 5)},
        lambda x: mb.argsort(x=x, axis=0, ascending=True),
        lambda x: [np.argsort(x, axis=0, kind="stable").astype(np.int32)],
        input_specs=DYN,
    ),
    Case(
        "t_dyn_slice_by_index",
        {"x": randn(6, 5)},
        lambda x: mb.slice_by_index(
            x=x,
            begin=[-2, 1],
            end=[0, 4],
            stride=[-2, 1],
            end_mask=[True, False],
            squeeze_mask=[False, False],
        ),
        lambda x: [x[-2::-2, 1:4]],
        input_specs=DYN,
    ),
    Case(
        "t_dyn_split",
        {"x": randn(4, 5)},
        lambda x: mb.split(x=x, num_splits=2, axis=0),
        lambda x: np.split(x, 2, axis=0),
        input_specs=DYN,
    ),
    Case(
        "t_dyn_fill_like",
        {"x": randn(3, 5)},
        lambda x: mb.fill_like(ref_tensor=x, value=-1.5),
        lambda x: [np.full((3, 5), -1.5, np.float32)],
        opset="iOS16",
        input_specs=DYN,
    ),
    Case(
        "t_dyn_topk",
        {"x": randn(3, 5)},
        lambda x: mb.topk(x=x, k=2, axis=0),
        lambda x: topk_ref(x, 2, 0, False),
        input_specs=DYN,
    ),
]


GB_X = randn(2, 3, 4, 5)
GB_I = ints([0, 3, -1, 1, 2, 2], [2, -4, 0, 3, 1, 1])

CASES += [
    Case(
        "t_gather_batch_dims_axis2",
        {"x": GB_X, "i": GB_I},
        lambda x, i: mb.gather(x=x, indices=i, axis=2, batch_dims=1),
        lambda x, i: [np.stack([np.take(x[b], i[b], axis=1) for b in range(2)])],
        opset="iOS16",
    ),
    Case(
        "t_gather_batch_dims_neg_axis",
        {"x": GB_X, "i": GB_I.reshape(2, 2, 3)},
        lambda x, i: mb.gather(x=x, indices=i, axis=-1, batch_dims=1),
        lambda x, i: [np.stack([np.take(x[b], i[b] % 5, axis=2) for b in range(2)])],
        opset="iOS16",
    ),
]


CASES += [
    Case(
        "t_dyn_reshape_zero",
        {"x": randn(3, 5)},
        lambda x: mb.reshape(x=x, shape=[1, 0, -1, 0]),
        lambda x: [x.reshape(1, 1, 3, 5)],  # the 0s copy dims aligned from the right: none, then 5
        opset="iOS17",
        input_specs=DYN,
    ),
    Case(
        "t_squeeze_torch",
        {"x": randn(2, 1, 3, 1)},
        lambda x: mb.squeeze(x=x, axes=[0, 1, -1]),
        lambda x: [x.reshape(2, 3)],
    ),
    Case(
        "t_stack_middle",
        {"x": randn(2, 3), "y": randn(2, 3), "z": randn(2, 3)},
        lambda x, y, z: mb.stack(values=(x, y, z), axis=-2),
        lambda x, y, z: [np.stack([x, y, z], axis=-2)],
    ),
]


CASES += [
    Case(
        "t_slice_update_dynamic",
        {"x": randn(1, 2, 8, 4), "u": randn(1, 2, 3, 4), "b": ints(0, 0, 5, 0)},
        lambda x, u, b: mb.slice_update(x=x, update=u, begin=b, end=mb.add(x=b, y=ints(1, 2, 3, 4))),
        lambda x, u, b: [np.concatenate([x[:, :, :5], u], axis=2)],
        opset="iOS18",
    ),
    Case(
        "t_slice_update_masks",
        {"x": randn(4, 6), "u": randn(4, 2)},
        lambda x, u: mb.slice_update(
            x=x,
            update=u,
            begin=[0, -2],
            end=[0, 0],
            stride=[-1, -3],
            begin_mask=[True, False],
            end_mask=[True, True],
        ),
        lambda x, u: [_set2(x, u)],
        opset="iOS18",
    ),
]


def _set2(x, u):
    y = x.copy()
    y[::-1, -2::-3] = u
    return y


CASES += [
    Case(
        "t_upsample_nearest_fraction",
        {"x": SMALL},
        lambda x: mb.upsample_nearest_neighbor(x=x, scale_factor_height=1.5, scale_factor_width=0.5),
        lambda x: [x[:, :, [0, 0, 1, 2, 2, 3]][..., [0, 2]]],
    ),
]


CASES += [
    Case(
        "t_crop_resize_default_indices",
        {"x": CROP_X, "boxes": BOXES[1:3, [1, 0, 3, 2]] / 6},
        lambda x, boxes: mb.crop_resize(
            x=x,
            boxes=boxes,
            target_height=2,
            target_width=2,
            normalized_coordinates=True,
            spatial_scale=1.5,
            box_coordinate_mode="CORNERS_WIDTH_FIRST",
            sampling_mode="STRICT_ALIGN_CORNERS",
        ),
        lambda x, boxes: [
            crop_and_resize_ref(
                x, boxes[:, [1, 0, 3, 2]], [0, 1], 2, 2, "STRICT_ALIGN_CORNERS", 0.0, 1.5, True
            )
        ],
        opset="iOS17",
    ),
]


def _set(x, u):
    y = x.copy()
    y[1:3, 0:4:2, -1] = u
    return y
