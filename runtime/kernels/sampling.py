"""Sampling kernels: GridSample, AffineGrid, DeformConv and the RoI ops RoiAlign and MaxRoiPool."""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from offload.errors import ShapeError

from . import kernel
from ._util import unsupported
from .conv import _grouped_product
from .linalg import widened
from .windows import _channel_bias, _geometry

# ---------------------------------------------------------------------------- sampling


def _taps(x, mode: str):
    """Integer sample positions and weights that interpolate at float positions x along one axis."""
    if mode == "nearest":
        return [(np.rint(x).astype(np.int64), np.ones_like(x))]
    lo = np.floor(x)
    t = x - lo
    lo = lo.astype(np.int64)
    if mode == "linear":
        return [(lo, 1 - t), (lo + 1, t)]
    # Cubic convolution (Keys) with a = -0.75, as in PyTorch and OpenCV.
    a = -0.75

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [(lo - 1, far(1 + t)), (lo, near(t)), (lo + 1, near(1 - t)), (lo + 2, far(2 - t))]


def _interpolate(img, pos, mode: str, fix_tap=None):
    """Sample img (B, C, *S) at float index positions pos (B, P, nd) -> (B, C, P).

    Taps outside the image read 0, unless ``fix_tap(index, axis)`` first maps them inside.
    """
    size = img.shape[2:]
    per_axis = [_taps(pos[..., i], mode) for i in range(len(size))]
    batch = np.arange(img.shape[0])[:, None]
    out = np.zeros(pos.shape[:2] + img.shape[1:2], img.dtype)
    for combo in itertools.product(*per_axis):
        weight = prod(w for _, w in combo)
        index, valid = [], np.ones(weight.shape, bool)
        for axis, (i, _) in enumerate(combo):
            if fix_tap is not None:
                i = fix_tap(i, axis)
            valid &= (i >= 0) & (i < size[axis])
            index.append(np.clip(i, 0, size[axis] - 1))
        # Advanced indices around the channel slice put (B, P) first: (B, P, C).
        out += img[(batch, slice(None)) + tuple(index)] * (weight * valid)[..., None]
    return out.transpose(0, 2, 1)


def _reflect(x, low: float, high: float):
    """x folded into [low, high] by repeated reflection at both ends."""
    span = high - low
    if span <= 0:
        return np.zeros_like(x)
    d = np.abs(x - low)
    flips = np.floor(d / span)
    rest = d - flips * span
    return np.where(flips % 2 == 0, low + rest, high - rest)


def _inside(x, size: int, padding_mode: str, align_corners: int):
    """Positions outside [0, size-1] moved inside by the border or reflection rule."""
    if padding_mode == "reflection":
        x = _reflect(x, 0, size - 1) if align_corners else _reflect(x, -0.5, size - 0.5)
    return np.clip(x, 0, size - 1)


@kernel("GridSample")
def grid_sample(ctx, X, grid, *, align_corners, mode, padding_mode):
    modes = {
        "linear": "linear",
        "bilinear": "linear",
        "nearest": "nearest",
        "cubic": "cubic",
        "bicubic": "cubic",
    }
    if mode not in modes:
        raise unsupported("GridSample", f"mode={mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise unsupported("GridSample", f"padding_mode={padding_mode!r}")
    mode = modes[mode]
    if X.dtype.kind in "iu" and mode == "nearest":
        x = X.astype(np.float64)  # exact: nearest only copies values
    elif X.dtype.kind in "biuOSUc":
        raise unsupported("GridSample", f"mode={mode!r} on {X.dtype} input")
    else:
        x = widened(X)
    n, c = x.shape[:2]
    size = x.shape[2:]
    nd = len(size)
    if grid.shape[0] != n or grid.shape[-1] != nd:
        raise ShapeError(f"GridSample: grid of shape {grid.shape} does not fit input of shape {X.shape}")
    # The grid lists x (innermost axis) first; normalized [-1, 1] becomes index positions.
    pos = widened(grid)[..., ::-1].reshape(n, -1, nd).astype(x.dtype)
    extent = np.array(size, x.dtype)
    pos = (pos + 1) / 2 * (extent - 1) if align_corners else ((pos + 1) * extent - 1) / 2
    fix_tap = None
    if padding_mode != "zeros":
        if mode == "cubic":
            # Cubic reads each of its taps through the padding rule.
            def fix_tap(i, axis):
                return _inside(i.astype(x.dtype), size[axis], padding_mode, align_corners).astype(np.int64)
        else:
            pos = np.stack(
                [_inside(pos[..., i], size[i], padding_mode, align_corners) for i in range(nd)], -1
            )
    y = _interpolate(x, pos, mode, fix_tap)
    return y.reshape((n, c) + grid.shape[1:-1]).astype(X.dtype, copy=False)


@kernel("AffineGrid")
def affine_grid(ctx, theta, size, *, align_corners):
    size = tuple(int(v) for v in size)
    spatial = size[2:]
    nd = len(spatial)
    if theta.shape[1:] != (nd, nd + 1):
        raise ShapeError(f"AffineGrid: theta of shape {theta.shape} does not fit size {size}")
    t = widened(theta)

    def axis(m):
        if m <= 1:
            return np.zeros(m, t.dtype)
        if align_corners:
            return np.linspace(-1, 1, m, dtype=t.dtype)
        return ((2 * np.arange(m) + 1) / m - 1).astype(t.dtype)

    mesh = np.meshgrid(*(axis(m) for m in spatial), indexing="ij")
    # Homogeneous positions (x, y[, z], 1): innermost axis first, as GridSample reads them.
    base = np.stack(list(mesh[::-1]) + [np.ones(spatial, t.dtype)], axis=-1)
    grid = base.reshape(-1, nd + 1) @ t.transpose(0, 2, 1)  # (N, points, nd)
    return grid.reshape((size[0],) + spatial + (nd,)).astype(theta.dtype, copy=False)


@kernel("DeformConv")
def deform_conv(
    ctx, X, W, offset, B=None, mask=None, *, dilations, group, kernel_shape, offset_group, pads, strides
):
    x, w = widened(X), widened(W)
    g = _geometry("DeformConv", x.shape, kernel_shape or w.shape[2:], "NOTSET", dilations, pads, strides)
    n, c = x.shape[:2]
    nd = x.ndim - 2
    og = offset_group
    nk = prod(g.kernel)
    if c % og or offset.shape[1] != og * nk * nd or tuple(offset.shape[2:]) != g.out:
        raise ShapeError(
            f"DeformConv: offset of shape {offset.shape} does not fit input {x.shape}, kernel {g.kernel}"
        )
    # Undeformed sample positions o*s - begin + k*d: (kernel, nd, *out).
    k_at = np.indices(g.kernel).reshape(nd, nk)
    o_at = np.indices(g.out)
    base = np.stack(
        [
            (o_at[i] * g.strides[i] - g.begin[i])[None]
            + (k_at[i] * g.dilations[i]).reshape((nk,) + (1,) * nd)
            for i in range(nd)
        ],
        axis=1,
    )
    pos = base + widened(offset).reshape((n, og, nk, nd) + g.out)
    pos = np.moveaxis(pos, 3, -1).reshape(n * og, -1, nd).astype(x.dtype)
    vals = _interpolate(x.reshape((n * og, c // og) + x.shape[2:]), pos, "linear")
    vals = vals.reshape((n, og, c // og, nk) + g.out)
    if mask is not None:
        vals = vals * widened(mask).reshape((n, og, 1, nk) + g.out)
    cols = np.moveaxis(vals.reshape((n, c, nk) + g.out), 2, -1).reshape((n, c) + g.out + g.kernel)
    y = _grouped_product(cols, w, group)
    if B is not None:
        y += _channel_bias(B, nd)
    return y.astype(X.dtype, copy=False)


# ---------------------------------------------------------------------------- regions of interest


def _roi_axis(start, length, bins: int, samples: int, size: int):
    """Bilinear weights (bins, size) that average ``samples`` points per bin along one axis.

    Also returns the per-point corner indices and weights (bins, samples, 2) that max mode
    needs. Points beyond one pixel outside the image read 0; points near the edges clamp.
    """
    at = start + (np.arange(bins)[:, None] + (np.arange(samples) + 0.5) / samples) * (length / bins)
    outside = (at < -1) | (at > size)
    at = np.clip(at, 0, None)
    low = np.floor(at).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, at - low)
    weights = np.stack([1 - frac, frac], -1) * ~outside[..., None]
    index = np.stack([low, high], -1)
    dense = np.zeros((bins, size))
    rows = np.broadcast_to(np.arange(bins)[:, None, None], index.shape)
    np.add.at(dense, (rows, index), weights / samples)
    return dense, index, weights


@kernel("RoiAlign")
def roi_align(
    ctx,
    X,
    rois,
    batch_indices,
    *,
    coordinate_transformation_mode,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
):
    if mode not in ("avg", "max"):
        raise unsupported("RoiAlign", f"mode={mode!r}")
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise unsupported("RoiAlign", f"coordinate_transformation_mode={coordinate_transformation_mode!r}")
    half_pixel = coordinate_transformation_mode == "half_pixel"
    x = X.astype(np.float64)
    h, w = x.shape[2:]
    y = np.zeros((len(rois), x.shape[1], output_height, output_width))
    for r, (box, b) in enumerate(zip(np.asarray(rois, np.float64), np.asarray(batch_indices, np.int64))):
        x1, y1, x2, y2 = box * spatial_scale - (0.5 if half_pixel else 0.0)
        roi_h, roi_w = y2 - y1, x2 - x1
        if not half_pixel:
            roi_h, roi_w = max(roi_h, 1.0), max(roi_w, 1.0)
        sh = sampling_ratio if sampling_ratio > 0 else max(1, int(np.ceil(roi_h / output_height)))
        sw = sampling_ratio if sampling_ratio > 0 else max(1, int(np.ceil(roi_w / output_width)))
        ay, iy, wy = _roi_axis(y1, roi_h, output_height, sh, h)
        ax, ix, wx = _roi_axis(x1, roi_w, output_width, sw, w)
        if mode == "avg":
            y[r] = ay @ x[b] @ ax.T
            continue
        # Max mode takes, like the reference runtimes, the largest weighted corner of any point.
        corners = x[b][:, iy[:, :, :, None, None, None], ix[None, None, None]]  # C, bh, sh, 2, bw, sw, 2
        weighted = corners * (wy[:, :, :, None, None, None] * wx[None, None, None])
        y[r] = weighted.max(axis=(2, 3, 5, 6))
    return y.astype(X.dtype)


@kernel("MaxRoiPool")
def max_roi_pool(ctx, X, rois, *, pooled_shape, spatial_scale):
    ph, pw = (int(v) for v in pooled_shape)
    h, w = X.shape[2:]
    y = np.zeros((len(rois), X.shape[1], ph, pw), X.dtype)
    for r, roi in enumerate(rois):
        b = int(roi[0])
        # Box corners round half away from zero (C's round), as in Caffe's RoI pooling.
        corner = roi[1:] * roi.dtype.type(spatial_scale)
        x1, y1, x2, y2 = (np.sign(corner) * np.floor(np.abs(corner) + 0.5)).astype(np.int64)
        rows = _roi_bins(y1, y2, ph, h)  # (ph, h) membership
        cols = _roi_bins(x1, x2, pw, w)
        # Separable max: over each bin's columns, then over its rows; empty bins are 0.
        img = X[b].astype(np.float64)
        by_col = np.where(cols[None, None], img[:, :, None, :], -np.inf).max(-1)  # C, h, pw
        full = np.where(rows[None, :, :, None], by_col[:, None], -np.inf).max(2)  # C, ph, pw
        y[r] = np.where(np.isneginf(full), 0, full)
    return y


def _roi_bins(start: int, end: int, bins: int, size: int):
    """Which of ``size`` pixels fall in each of ``bins`` equal bins of [start, end]: (bins, size)."""
    step = max(end - start + 1, 1) / bins
    k = np.arange(bins)
    lo = np.clip(np.floor(k * step).astype(np.int64) + start, 0, size)
    hi = np.clip(np.ceil((k + 1) * step).astype(np.int64) + start, 0, size)
    at = np.arange(size)
    return (at >= lo[:, None]) & (at < hi[:, None])
