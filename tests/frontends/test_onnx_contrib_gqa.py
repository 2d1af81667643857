"""com.microsoft::GroupQueryAttention (frontends/onnx_contrib_gqa.py) against onnxruntime's CPU
kernel: prompts (right-padded rows), token generation over a ragged past, GQA and MHA, rotary
embedding, local windows, softcap, packed QKV, sinks, float16, symbolic dims; refused forms; the
.pte path; on `opencl`."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import offload
from offload.errors import UnsupportedOpError
from tests.delegates.opencl_support import needs_opencl, run_on_opencl
from tests.frontends.contrib_support import SUMS, compare, contrib_model, node, normal, onnxruntime_run

RNG = np.random.default_rng(2026)
OUTPUTS = ["y", "present_key", "present_value"]


def _case(
    batch=2,
    seq=5,
    past=0,
    lengths=None,
    heads=4,
    kv_heads=2,
    head=8,
    rotary=0,
    packed=False,
    bias=False,
    sink=False,
    **attrs,
):
    """A one-node model and its feeds. ``lengths``: each row's total length (past + new)."""
    lengths = lengths or [past + seq] * batch
    total = max(lengths + [seq])
    q = normal(RNG, batch, seq, heads * head)
    k, v = (normal(RNG, batch, seq, kv_heads * head) for _ in range(2))
    feeds = {"q": np.concatenate([q, k, v], axis=2) if packed else q}
    inputs = ["q", "", ""] if packed else ["q", "k", "v"]
    if not packed:
        feeds.update(k=k, v=v)
    if past:
        feeds["past_key"] = normal(RNG, batch, kv_heads, past, head)
        feeds["past_value"] = normal(RNG, batch, kv_heads, past, head)
        inputs += ["past_key", "past_value"]
    else:
        inputs += ["", ""]
    feeds["seqlens_k"] = np.array(lengths, np.int32) - 1
    feeds["total"] = np.array(total, np.int32)
    inputs += ["seqlens_k", "total"]
    inits = []
    if rotary:
        angles = np.arange(total + 4)[:, None] * (1e-2 ** (np.arange(rotary // 2) / (rotary // 2)))[None]
        inits = [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32))]
        inputs += ["cos", "sin"]
        attrs["do_rotary"] = 1
    if bias or sink:
        inputs += [""] * (9 - len(inputs)) + ["", "", ""]
        if bias:
            feeds["bias"] = normal(RNG, 1, heads, seq, total)
            inputs[10] = "bias"
        if sink:
            inits.append(("sink", normal(RNG, heads)))
            inputs[11] = "sink"
    while inputs[-1] == "":
        inputs.pop()
    n = node("GroupQueryAttention", inputs, OUTPUTS, num_heads=heads, kv_num_heads=kv_heads, **attrs)
    return contrib_model([n], feeds, OUTPUTS, inits), feeds


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # prompt, GQA, every row full
        {"lengths": [5, 3]},  # prompt, the second row right-padded
        {"batch": 1, "heads": 2, "kv_heads": 2},  # MHA
        {"heads": 4, "kv_heads": 1, "scale": 0.3},
        {"seq": 1, "past": 6, "lengths": [7, 5]},  # token generation, ragged past
        {"seq": 1, "past": 6, "lengths": [7, 4], "heads": 2, "kv_heads": 2},
        {"batch": 1, "seq": 3, "past": 4},  # a later prompt chunk over a cache
        {"head": 16, "rotary": 16, "lengths": [5, 2]},
        {"head": 16, "rotary": 16, "rotary_interleaved": 1, "seq": 1, "past": 6, "lengths": [7, 3]},
        {"head": 32, "rotary": 16, "seq": 1, "past": 5, "lengths": [6, 4]},  # partial rotary
        {"local_window_size": 3},
        {"local_window_size": 2, "seq": 1, "past": 6, "lengths": [7, 5]},
        {"softcap": 2.0, "lengths": [5, 4]},
        {"softcap": 1.5, "seq": 1, "past": 3, "scale": 0.5, "local_window_size": 2},
        {"packed": True, "lengths": [5, 4]},
        {"packed": True, "head": 16, "rotary": 16, "seq": 1, "past": 4, "lengths": [5, 3]},
        {"bias": True, "lengths": [5, 4]},
        {"sink": True, "seq": 1, "past": 4, "lengths": [5, 2]},
        {"smooth_softmax": 1, "local_window_size": 2},
        {"causal": 0, "lengths": [5, 3]},
        {"causal": 0, "seq": 1, "past": 5, "lengths": [6, 2], "head": 16, "rotary": 16},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "prompt",
)
def test_group_query_attention(kwargs):
    data, feeds = _case(**kwargs)
    compare(data, feeds, **SUMS)


def test_group_query_attention_decodes_step_by_step():
    """A prompt, then tokens fed one at a time with the present of each step as the next past."""
    heads, kv_heads, head, prompt = 4, 2, 16, 4
    angles = np.arange(16)[:, None] * (1e-2 ** (np.arange(8) / 8))[None]
    inits = [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32))]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": 1, "local_window_size": 3}
    feeds = {"q": normal(RNG, 1, prompt, heads * head), "k": normal(RNG, 1, prompt, kv_heads * head)}
    feeds.update(v=normal(RNG, 1, prompt, kv_heads * head), seqlens_k=np.array([prompt - 1], np.int32))
    feeds["total"] = np.array(prompt, np.int32)
    inputs = ["q", "k", "v", "", "", "seqlens_k", "total", "cos", "sin"]
    first = contrib_model([node("GroupQueryAttention", inputs, OUTPUTS, **attrs)], feeds, OUTPUTS, inits)
    got = compare(first, feeds, **SUMS)
    inputs[3:5] = ["past_key", "past_value"]
    for step in range(prompt, prompt + 3):
        feeds = {
            "q": normal(RNG, 1, 1, heads * head),
            "k": normal(RNG, 1, 1, kv_heads * head),
            "v": normal(RNG, 1, 1, kv_heads * head),
            "past_key": got["present_key"],
            "past_value": got["present_value"],
            "seqlens_k": np.array([step], np.int32),
            "total": np.array(step + 1, np.int32),
        }
        n = node("GroupQueryAttention", inputs, OUTPUTS, **attrs)
        got = compare(contrib_model([n], feeds, OUTPUTS, inits), feeds, **SUMS)
        assert got["present_key"].shape == (1, kv_heads, step + 1, head)


def test_group_query_attention_float16():
    """float16 in and out: onnxruntime and the rewrite both compute the attention in float32 and
    round the output once (bit for bit the same here); one float16 ulp (2^-10 relative) leaves
    room for another summation order."""
    data, feeds = _case(seq=1, past=6, lengths=[7, 4], head=16, rotary=16, softcap=3.0)
    model = onnx.load_from_string(data)
    for info in list(model.graph.input) + list(model.graph.output):
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.FLOAT16
    for init in model.graph.initializer:
        init.CopyFrom(
            onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init).astype(np.float16), init.name)
        )
    feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    got = compare(model.SerializeToString(), feeds, rtol=1e-3, atol=1e-3)
    assert got["y"].dtype == np.float16


def _symbolic_model(heads: int, kv_heads: int, head: int) -> bytes:
    """A model with onnxruntime-genai's dims: batch, sequence and past length as symbols."""
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    inputs = [
        helper.make_tensor_value_info("q", f, ["batch", "seq", heads * head]),
        helper.make_tensor_value_info("k", f, ["batch", "seq", kv_heads * head]),
        helper.make_tensor_value_info("v", f, ["batch", "seq", kv_heads * head]),
        helper.make_tensor_value_info("past_key", f, ["batch", kv_heads, "past", head]),
        helper.make_tensor_value_info("past_value", f, ["batch", kv_heads, "past", head]),
        helper.make_tensor_value_info("seqlens_k", i32, ["batch"]),
        helper.make_tensor_value_info("total", i32, []),
    ]
    outputs = [helper.make_tensor_value_info(name, f, None) for name in OUTPUTS]
    attrs = {"num_heads": heads, "kv_num_heads": kv_heads, "local_window_size": 5}
    n = node("GroupQueryAttention", [i.name for i in inputs], OUTPUTS, **attrs)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    graph = helper.make_graph([n], "g", inputs, outputs)
    return helper.make_model(graph, ir_version=10, opset_imports=opsets).SerializeToString()


def test_group_query_attention_symbolic_dims(tmp_path):
    """One .pte for a prompt over an empty past (length 0, as onnxruntime-genai feeds it) and the
    token steps after it, against onnxruntime step by step."""
    heads, kv_heads, head = 4, 2, 8
    data = _symbolic_model(heads, kv_heads, head)
    path = tmp_path / "gqa.pte"
    offload.save(offload.load(data), str(path))
    module = offload.runtime.load(str(path))
    lengths = np.array([6, 4])
    cache = np.zeros((2, kv_heads, 0, head), np.float32)
    feeds = {"past_key": cache, "past_value": cache, "seqlens_k": (lengths - 1).astype(np.int32)}
    seq = 6
    for _ in range(3):
        feeds.update(
            q=normal(RNG, 2, seq, heads * head),
            k=normal(RNG, 2, seq, kv_heads * head),
            v=normal(RNG, 2, seq, kv_heads * head),
            total=np.array(lengths.max(), np.int32),
        )
        want, got = onnxruntime_run(data, feeds), module.run(feeds)
        # the op leaves a padded row's output and cache rows past T_b unspecified (here
        # onnxruntime's kernel over a past of length 0 lets a padded row see padded keys)
        for b, total in enumerate(lengths):
            rows = min(seq, total)
            np.testing.assert_allclose(got["y"][b, :rows], want["y"][b, :rows], **SUMS)
            for name in OUTPUTS[1:]:
                np.testing.assert_allclose(got[name][b, :, :total], want[name][b, :, :total], **SUMS)
        feeds.update(past_key=want["present_key"], past_value=want["present_value"])
        lengths, seq = lengths + 1, 1
        feeds["seqlens_k"] = (lengths - 1).astype(np.int32)


def test_group_query_attention_through_pte(tmp_path):
    data, feeds = _case(seq=1, past=6, lengths=[7, 5], head=16, rotary=16, local_window_size=4)
    want = onnxruntime_run(data, feeds)
    path = tmp_path / "gqa.pte"
    offload.save(offload.load(data), str(path))
    got = offload.runtime.load(str(path)).run(feeds)
    for name in OUTPUTS:
        np.testing.assert_allclose(got[name], want[name], err_msg=name, **SUMS)


@needs_opencl
def test_group_query_attention_runs_on_opencl(tmp_path):
    data, feeds = _case(seq=1, past=6, lengths=[7, 5], head=16, rotary=16, local_window_size=4)
    want = onnxruntime_run(data, feeds)
    lowered, got = run_on_opencl(offload.load(data), feeds, tmp_path)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for name in OUTPUTS:
        np.testing.assert_allclose(got[name], want[name], err_msg=name, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "attrs,extra,what",
    [
        ({"causal": 0, "local_window_size": 2}, {}, "local_window_size=2 and causal=0"),
        ({"local_window_size": 0}, {}, "local_window_size=0"),
        ({"sliding_window_cache": 1, "local_window_size": 4}, {}, "sliding_window_cache=1"),
        ({"k_quant_type": "PER_TENSOR"}, {}, "k_quant_type"),
        ({}, {9: "position_ids"}, "input position_ids"),
        ({}, {16: "query_seqlens"}, "input query_seqlens"),
    ],
)
def test_group_query_attention_refuses(attrs, extra, what):
    feeds = {
        "q": normal(RNG, 1, 2, 16),
        "k": normal(RNG, 1, 2, 8),
        "v": normal(RNG, 1, 2, 8),
        "seqlens_k": np.array([1], np.int32),
        "total": np.array(2, np.int32),
    }
    inputs = ["q", "k", "v", "", "", "seqlens_k", "total"]
    for i, name in extra.items():
        inputs += [""] * (i - len(inputs)) + [name]
        feeds[name] = np.zeros((1, 2), np.int64 if name == "position_ids" else np.int32)[
            :, : 2 if i == 9 else 1
        ]
        if name == "query_seqlens":
            feeds[name] = np.array([2], np.int32)
    n = node("GroupQueryAttention", inputs, ["y"], num_heads=2, kv_num_heads=1, **attrs)
    with pytest.raises(UnsupportedOpError, match=f"GroupQueryAttention with {what}"):
        offload.load(contrib_model([n], feeds, ["y"]))
