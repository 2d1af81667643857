"""Inference rules of signal, text and fused ops."""

from __future__ import annotations

import math

from .infer_dims import _attr_dtype, _axis, _dims_value, _dtype, _exact_div, _input, _ints_value, _shape, _tt
from .registry import inference
from .types import DataType, TensorType


@inference("Col2Im")
def _col2im(op, attrs):
    x, image, block = _shape(op, 0), _dims_value(op, 1), _ints_value(op, 2)
    if x is None or len(x) != 3 or image is None:
        return [_tt(_dtype(op, 0), None)]
    channels = _exact_div(x[1], math.prod(block)) if block else None
    return [_tt(_dtype(op, 0), (x[0], channels, *image))]


@inference("DFT")
def _dft(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    if x is None or len(x) < 2:
        return [_tt(dtype, None)]
    onesided, inverse = bool(attrs.get("onesided")), bool(attrs.get("inverse"))
    last = 1 if onesided and inverse else 2  # an inverse one-sided DFT gives a real signal
    axis = _dft_axis(op, len(x))
    if axis is None:
        return [_tt(dtype, (None,) * (len(x) - 1) + (last,))]
    n = x[axis]
    if _input(op, 1) is not None:
        length = _ints_value(op, 1)
        n = length[0] if length and len(length) == 1 else None
    elif onesided and inverse:
        n = 2 * (n - 1) if isinstance(n, int) else None
    if onesided and not inverse:
        n = n // 2 + 1 if isinstance(n, int) else None
    return [_tt(dtype, (*x[:axis], n, *x[axis + 1 : -1], last))]


def _dft_axis(op, rank: int) -> int | None:
    # DFT before opset 20 took the axis as an attribute; the importer may keep that form.
    if "axis" in op.attributes:
        value = [op.attributes["axis"]]
    else:
        value = _ints_value(op, 2) if _input(op, 2) is not None else [-2]
    axis = _axis(value[0], rank) if value and len(value) == 1 else None
    return None if axis == rank - 1 else axis


@inference("STFT")
def _stft(op, attrs):
    x, dtype = _shape(op, 0), _dtype(op, 0)
    if x is None or len(x) != 3:
        return [_tt(dtype, None)]
    step = _ints_value(op, 1)
    length = _ints_value(op, 3) if _input(op, 3) is not None else None
    window = _shape(op, 2) if _input(op, 2) is not None else None
    if _input(op, 3) is not None:
        frame = length[0] if length else None
    else:
        frame = window[0] if window else x[1]
    frames = bins = None
    if isinstance(frame, int) and isinstance(x[1], int) and step and step[0] > 0:
        frames = (x[1] - frame) // step[0] + 1
    if isinstance(frame, int):
        bins = frame // 2 + 1 if attrs.get("onesided", 1) else frame
    return [_tt(dtype, (x[0], frames, bins, 2))]


@inference("MelWeightMatrix")
def _mel_weight_matrix(op, attrs):
    bins, length = _ints_value(op, 0), _ints_value(op, 1)
    rows = length[0] // 2 + 1 if length and len(length) == 1 else None
    cols = bins[0] if bins and len(bins) == 1 else None
    return [_tt(_attr_dtype(attrs.get("output_datatype"), DataType.FLOAT), (rows, cols))]


@inference("TfIdfVectorizer")
def _tfidf(op, attrs):
    x = _shape(op, 0)
    indexes = attrs.get("ngram_indexes") or []
    width = max(indexes) + 1 if indexes else None
    if x is None or len(x) not in (1, 2):
        return [_tt(DataType.FLOAT, None)]
    return [_tt(DataType.FLOAT, (width,) if len(x) == 1 else (x[0], width))]


@inference("StringNormalizer")
def _string_normalizer(op, attrs):
    x = _shape(op, 0)
    if x is None or attrs.get("stopwords"):  # stopwords remove an unknown number of strings
        return [_tt(DataType.STRING, None if x is None else (*x[:-1], None))]
    return [_tt(DataType.STRING, x)]


@inference("ImageDecoder")
def _image_decoder(op, attrs):
    channels = 1 if attrs.get("pixel_format") == "Grayscale" else 3
    return [TensorType(DataType.UINT8, (None, None, channels))]


@inference("CausalConvWithState")
def _causal_conv(op, attrs):
    x, w, dtype = _shape(op, 0), _shape(op, 1), _dtype(op, 0)
    if x is None or len(x) != 3:
        return [_tt(dtype, None), _tt(dtype, None)]
    kernel = w[-1] - 1 if w and isinstance(w[-1], int) else None
    return [_tt(dtype, x), _tt(dtype, (x[0], x[1], kernel))]


@inference("LinearAttention")
def _linear_attention(op, attrs):
    q, k, v, dtype = _shape(op, 0), _shape(op, 1), _shape(op, 2), _dtype(op, 0)
    q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if q is None or k is None or v is None or len(q) != 3 or not q_heads or not kv_heads:
        return [_tt(dtype, None), _tt(_dtype(op, 3) or dtype, None)]
    d_k, d_v = _exact_div(k[2], kv_heads), _exact_div(v[2], kv_heads)
    return [
        _tt(dtype, (q[0], q[1], d_v * q_heads if isinstance(d_v, int) else None)),
        _tt(_dtype(op, 3) or dtype, (q[0], kv_heads, d_k, d_v)),
    ]


@inference("FlexAttention", domain="ai.onnx.preview")
def _flex_attention(op, attrs):
    q, v = _shape(op, 0), _shape(op, 2)
    if q is None or v is None or len(q) != 4 or len(v) != 4:
        return [_tt(_dtype(op, 0), None)]
    return [_tt(_dtype(op, 0), (*q[:3], v[3]))]
