"""onnxruntime's com.microsoft attention ops (Attention, MultiHeadAttention, RotaryEmbedding) as ONNX
Attention / RotaryEmbedding (frontends/onnx_contrib_attention.py), against onnxruntime; and on `opencl`."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.errors import UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.contrib_support import (
    ELEMENTWISE,
    SUMS,
    attention_mask,
    compare,
    contrib_model,
    node,
    normal,
    onnxruntime_run,
)

RNG = np.random.default_rng(2025)


def _x(*shape, scale=2.0):
    return normal(RNG, *shape, scale=scale)


def _mask(kind: str, b: int, s: int, t: int) -> np.ndarray:
    return attention_mask(RNG, kind, b, s, t)
    m = (RNG.random((b, s, t)) > 0.3).astype(np.int32)
    m[..., 0] = 1
    return m


@pytest.mark.parametrize(
    "mask,causal,past,attn_bias,sizes",
    [
        (None, 0, 0, False, None),
        ("2d", 0, 0, False, None),
        ("1d", 0, 0, False, None),
        ("1d_start", 0, 0, False, None),
        ("3d", 0, 0, False, None),
        (None, 1, 0, False, None),
        ("2d", 1, 0, True, None),
        (None, 0, 0, False, [16, 16, 8]),
        (None, 1, 3, False, None),
        ("2d", 0, 3, False, None),
    ],
)
def test_attention(mask, causal, past, attn_bias, sizes):
    b, s, hidden, heads = 2, 5, 16, 4
    width = sum(sizes) if sizes else 3 * hidden
    feeds = {"x": _x(b, s, hidden, scale=0.5)}
    inputs = ["x", "w", "bias", "", "", ""]
    t = past + s
    if mask is not None:
        feeds["mask"] = _mask(mask, b, s, t)
        inputs[3] = "mask"
    if past:
        feeds["past"] = _x(2, b, heads, past, hidden // heads, scale=0.5)
        inputs[4] = "past"
    if attn_bias:
        feeds["attn_bias"] = _x(1, heads, s, t, scale=0.5)
        inputs[5] = "attn_bias"
    while inputs[-1] == "":
        inputs.pop()
    attrs = {"num_heads": heads, "unidirectional": causal}
    if sizes:
        attrs["qkv_hidden_sizes"] = sizes
    outputs = ["y", "present"] if past else ["y"]
    inits = [("w", _x(hidden, width, scale=0.3)), ("bias", _x(width, scale=0.3))]
    data = contrib_model([node("Attention", inputs, outputs, **attrs)], feeds, outputs, inits)
    compare(data, feeds, **SUMS)


@pytest.mark.parametrize(
    "mask,causal,past,bias,scale",
    [
        (None, 0, 0, False, 0.0),
        ("2d", 0, 0, True, 0.0),
        ("3d", 0, 0, True, 0.3),
        (None, 1, 0, False, 0.0),
        (None, 0, 4, True, 0.0),
        ("2d", 0, 4, False, 0.0),
        ("2d", 1, 4, True, 0.0),
    ],
)
def test_multi_head_attention(mask, causal, past, bias, scale):
    # causal: self-attention (as many new keys as queries; see the cross-attention case below)
    b, s, hidden, heads = 2, 3, 16, 2
    l = s if causal else 6
    feeds = {"q": _x(b, s, hidden, scale=0.5), "k": _x(b, l, hidden, scale=0.5), "v": _x(b, l, hidden)}
    inputs = ["q", "k", "v", "", "", "", "", ""]
    t = past + l
    if bias:
        feeds["bias"] = _x(3 * hidden, scale=0.3)
        inputs[3] = "bias"
    if mask is not None:
        feeds["mask"] = _mask(mask, b, s, t)
        inputs[4] = "mask"
    if past:
        feeds["past_key"] = _x(b, heads, past, hidden // heads)
        feeds["past_value"] = _x(b, heads, past, hidden // heads)
        inputs[6:8] = ["past_key", "past_value"]
    while inputs[-1] == "":
        inputs.pop()
    attrs = {"num_heads": heads, "unidirectional": causal}
    if scale:
        attrs["scale"] = scale
    outputs = ["y", "present_key", "present_value"] if past else ["y"]
    data = contrib_model([node("MultiHeadAttention", inputs, outputs, **attrs)], feeds, outputs)
    compare(data, feeds, **SUMS)


def test_causal_cross_attention_is_refused():
    # onnxruntime leaves the last query row of a causal cross-attention (more keys than queries)
    # unmasked, a form ONNX's is_causal does not take
    feeds = {"q": _x(1, 3, 8), "k": _x(1, 5, 8), "v": _x(1, 5, 8)}
    n = node("MultiHeadAttention", ["q", "k", "v"], ["y"], num_heads=2, unidirectional=1)
    with pytest.raises(UnsupportedOpError, match="MultiHeadAttention with unidirectional=1 over 5 keys"):
        offload.load(contrib_model([n], feeds, ["y"]))


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("offset", [False, True])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding(rank, interleaved, offset, rotary_dim):
    b, s, heads, head = 2, 5, 2, 8
    rot = rotary_dim or head
    x = _x(b, s, heads * head) if rank == 3 else _x(b, heads, s, head)
    positions = np.array([3], np.int64) if offset else RNG.integers(0, 12, (b, s)).astype(np.int64)
    feeds = {"x": x, "pos": positions}
    angles = np.arange(12)[:, None] * (1e-2 ** (np.arange(rot // 2) / (rot // 2)))[None]
    inits = [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32))]
    attrs = {"interleaved": interleaved}
    if rotary_dim or rank == 4:
        attrs.update(num_heads=heads, rotary_embedding_dim=rotary_dim)
    n = node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)
    data = contrib_model([n], feeds, ["y"], inits)
    compare(data, feeds, **ELEMENTWISE)


@needs_opencl
def test_attention_runs_on_opencl(tmp_path):
    b, s, hidden, heads = 2, 4, 16, 4
    feeds = {"x": _x(b, s, hidden, scale=0.5), "mask": _mask("2d", b, s, s)}
    inits = [("w", _x(hidden, 3 * hidden, scale=0.3)), ("bias", _x(3 * hidden, scale=0.3))]
    n = node("Attention", ["x", "w", "bias", "mask"], ["y"], num_heads=heads, unidirectional=1)
    data = contrib_model([n], feeds, ["y"], inits)
    want = onnxruntime_run(data, feeds)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path)
    assert "Attention" not in [op.op_type for op in lowered.main.body.operations]
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
