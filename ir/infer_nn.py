"""Inference rules of convolution, pooling, recurrent and attention ops."""

from __future__ import annotations

from .infer_dims import _dims_value, _dtype, _exact_div, _input, _ints_value, _merge_dim, _mul, _shape, _tt
from .registry import inference
from .types import DataType, Dim

_SAME_UPPER_LOWER = ("SAME_UPPER", "SAME_LOWER")

# ---- convolution and pooling ---------------------------------------------------------------


def _window_out(
    size: Dim,
    kernel: Dim,
    stride: int,
    pad_sum: int,
    pad_begin: int,
    dilation: int,
    auto_pad: str,
    ceil_mode: bool,
) -> Dim:
    """One spatial output dim of a sliding window (Conv, pools)."""
    if not isinstance(size, int) or not isinstance(kernel, int):
        return None
    if auto_pad in _SAME_UPPER_LOWER:
        return -(-size // stride)
    if auto_pad == "VALID":
        pad_sum = pad_begin = 0
    span = size + pad_sum - dilation * (kernel - 1) - 1
    if span < 0:
        return None
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    # A ceil-mode window must start inside the input or its left padding.
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def _spatial(in_dims, kernel, attrs, ceil_mode=False) -> list[Dim]:
    n = len(in_dims)
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    return [
        _window_out(
            in_dims[i],
            kernel[i],
            strides[i],
            pads[i] + pads[i + n],
            pads[i],
            dilations[i],
            auto_pad,
            ceil_mode,
        )
        for i in range(n)
    ]


def _conv_shape(x, w, attrs) -> tuple[Dim, ...] | None:
    if x is None or len(x) < 2:
        return None
    spatial = x[2:]
    kernel = attrs.get("kernel_shape") or (list(w[2:]) if w is not None else None)
    if kernel is None or len(kernel) != len(spatial):
        return (x[0], None if w is None else w[0]) + (None,) * len(spatial)
    return (x[0], None if w is None else w[0], *_spatial(spatial, kernel, attrs))


@inference("Conv", "DeformConv")
def _conv(op, attrs):
    return [_tt(_dtype(op, 0), _conv_shape(_shape(op, 0), _shape(op, 1), attrs))]


@inference("ConvInteger")
def _conv_integer(op, attrs):
    return [_tt(DataType.INT32, _conv_shape(_shape(op, 0), _shape(op, 1), attrs))]


@inference("QLinearConv")
def _qlinear_conv(op, attrs):
    return [_tt(_dtype(op, 7), _conv_shape(_shape(op, 0), _shape(op, 3), attrs))]


@inference("ConvTranspose")
def _conv_transpose(op, attrs):
    x, w = _shape(op, 0), _shape(op, 1)
    dtype = _dtype(op, 0)
    if x is None or len(x) < 2:
        return [_tt(dtype, None)]
    n = len(x) - 2
    channels = w[1] * attrs.get("group", 1) if w is not None and isinstance(w[1], int) else None
    explicit = attrs.get("output_shape")
    if explicit:
        return [_tt(dtype, (x[0], channels, *list(explicit)[-n:]))]
    kernel = attrs.get("kernel_shape") or (list(w[2:]) if w is not None else [None] * n)
    strides = attrs.get("strides") or [1] * n
    dilations = attrs.get("dilations") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    extra = attrs.get("output_padding") or [0] * n
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    out = []
    for i in range(n):
        d, k = x[2 + i], kernel[i]
        if not isinstance(d, int) or not isinstance(k, int):
            out.append(None)
        elif auto_pad in _SAME_UPPER_LOWER:
            out.append(d * strides[i])
        else:
            pad = 0 if auto_pad == "VALID" else pads[i] + pads[i + n]
            out.append(strides[i] * (d - 1) + extra[i] + (k - 1) * dilations[i] + 1 - pad)
    return [_tt(dtype, (x[0], channels, *out))]


def _pool_shape(op, attrs) -> tuple[Dim, ...] | None:
    x = _shape(op, 0)
    kernel = attrs.get("kernel_shape")
    if x is None or len(x) < 2 or not kernel or len(kernel) != len(x) - 2:
        return None
    return (x[0], x[1], *_spatial(x[2:], kernel, attrs, bool(attrs.get("ceil_mode"))))


@inference("AveragePool", "LpPool")
def _pool(op, attrs):
    return [_tt(_dtype(op, 0), _pool_shape(op, attrs))]


@inference("MaxPool")
def _max_pool(op, attrs):
    shape = _pool_shape(op, attrs)
    return [_tt(_dtype(op, 0), shape), _tt(DataType.INT64, shape)]


@inference("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(op, attrs):
    x = _shape(op, 0)
    shape = None if x is None or len(x) < 2 else (x[0], x[1]) + (1,) * (len(x) - 2)
    return [_tt(_dtype(op, 0), shape)]


@inference("MaxUnpool")
def _max_unpool(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    explicit = _ints_value(op, 2)
    if explicit is not None:
        return [_tt(dtype, explicit)]
    kernel = attrs.get("kernel_shape")
    if x is None or len(x) < 2 or _input(op, 2) is not None or not kernel:
        return [_tt(dtype, None if x is None else (None,) * len(x))]
    n = len(x) - 2
    strides = attrs.get("strides") or [1] * n
    pads = attrs.get("pads") or [0] * (2 * n)
    spatial = [
        (d - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n] if isinstance(d, int) else None
        for i, d in enumerate(x[2:])
    ]
    return [_tt(dtype, (x[0], x[1], *spatial))]


@inference("MaxRoiPool")
def _max_roi_pool(op, attrs):
    x, rois = _shape(op, 0), _shape(op, 1)
    pooled = list(attrs.get("pooled_shape") or [])
    if x is None or rois is None or len(x) < 2 or not rois:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (rois[0], x[1], *pooled))]


@inference("RoiAlign")
def _roi_align(op, attrs):
    x, rois = _shape(op, 0), _shape(op, 1)
    if x is None or rois is None or len(x) < 2 or not rois:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (rois[0], x[1], attrs.get("output_height", 1), attrs.get("output_width", 1)))]


@inference("GridSample")
def _grid_sample(op, attrs):
    x, grid = _shape(op, 0), _shape(op, 1)
    if x is None or grid is None or len(x) < 2 or len(grid) < 2:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (_merge_dim(x[0], grid[0]), x[1], *grid[1:-1]))]


@inference("AffineGrid")
def _affine_grid(op, attrs):
    size = _dims_value(op, 1)
    if size is None or len(size) < 3:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (size[0], *size[2:], len(size) - 2))]


@inference("DepthToSpace", "SpaceToDepth")
def _depth_space(op, attrs):
    x, b = _shape(op, 0), attrs.get("blocksize")
    if x is None or len(x) != 4 or not isinstance(b, int) or b <= 0:
        return [_tt(_dtype(op, 0), None if x is None else (None,) * len(x))]

    n, c, h, w = x
    if op.op_type == "DepthToSpace":
        shape = (n, _exact_div(c, b * b), _mul(h, b), _mul(w, b))
    else:
        shape = (n, _mul(c, b * b), _exact_div(h, b), _exact_div(w, b))
    return [_tt(_dtype(op, 0), shape)]


# ---- recurrent -----------------------------------------------------------------------------


@inference("RNN", "GRU", "LSTM")
def _recurrent(op, attrs):
    x, r, dtype = _shape(op, 0), _shape(op, 2), _dtype(op, 0)
    hidden = attrs.get("hidden_size") or (r[-1] if r else None)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    if x is None or len(x) != 3:
        return [_tt(dtype, None)] * len(op.outputs)
    if attrs.get("layout"):
        batch, seq = x[0], x[1]
        y, state = (batch, seq, dirs, hidden), (batch, dirs, hidden)
    else:
        seq, batch = x[0], x[1]
        y, state = (seq, dirs, batch, hidden), (dirs, batch, hidden)
    return [_tt(dtype, y)] + [_tt(dtype, state)] * (len(op.outputs) - 1)


@inference("Attention")
def _attention(op, attrs):
    q, k, v, dtype = _shape(op, 0), _shape(op, 1), _shape(op, 2), _dtype(op, 0)
    if q is None or k is None or v is None or len(q) != len(k) or len(q) not in (3, 4):
        return [_tt(dtype, None)]
    past = _shape(op, 4)
    if len(q) == 4:
        batch, q_heads, seq, kv_heads = q[0], q[1], q[2], k[1]
        head, v_head, kv_seq = k[3], v[3], k[2]
        y = (batch, q_heads, seq, v_head)
    else:
        q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not q_heads or not kv_heads:
            return [_tt(dtype, None)]
        batch, seq, kv_seq = q[0], q[1], k[1]
        head = k[2] // kv_heads if isinstance(k[2], int) else None
        v_head = v[2] // kv_heads if isinstance(v[2], int) else None
        y = (batch, seq, q_heads * v_head if v_head is not None else None)
    total = kv_seq
    if past is not None and len(past) == 4:
        total = past[2] + kv_seq if isinstance(past[2], int) and isinstance(kv_seq, int) else None
    return [
        _tt(dtype, y),
        _tt(_dtype(op, 1), (batch, kv_heads, total, head)),
        _tt(_dtype(op, 2), (batch, kv_heads, total, v_head)),
        _tt(dtype, (batch, q_heads, seq, total)),
    ]
