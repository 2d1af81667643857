"""The `opencl` backend's Attention and RotaryEmbedding on PoCL, against onnxruntime (opset 23)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload

from .opencl_support import needs_opencl, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(23)
_TYPES = {np.float32: TensorProto.FLOAT, np.bool_: TensorProto.BOOL, np.int64: TensorProto.INT64}


def _normal(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(node, inputs, outputs, initializers=()) -> onnx.ModelProto:
    """An opset 23 model: inputs are (name, dims, numpy dtype), outputs names (float32)."""
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, _TYPES[t], dims) for n, dims, t in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 23)])


def _check(onnx_model, feeds, tmp_path, rtol=1e-4, atol=1e-5, reference_model=None, onnx_reference=False):
    """``onnx_model`` run whole on opencl (one delegate) against onnxruntime, every output
    (onnxruntime runs ``reference_model`` instead when given: one it takes, listing more outputs;
    ``onnx_reference``: ONNX's own reference implementation instead of onnxruntime)."""
    import onnxruntime as ort

    reference_model = reference_model or onnx_model
    names = [o.name for o in onnx_model.graph.output]
    if onnx_reference:
        from onnx.reference import ReferenceEvaluator

        want = dict(zip(names, ReferenceEvaluator(reference_model).run(names, feeds)))
    else:
        session = ort.InferenceSession(
            reference_model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        want = dict(zip(names, session.run(names, feeds)))
    program = offload.load(onnx_model.SerializeToString())
    lowered, got = run_on_opencl(program, feeds, tmp_path, partitions=1)
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].shape, v.shape)
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)


def _stays_on_cpu(onnx_model):
    lowered = offload.to_backend(offload.load(onnx_model.SerializeToString()), "opencl", passes="none")
    return all(op.op_type != "Delegate" for op in lowered.main.body.operations)


def _attention(q, k, v, mask=None, past=None, outputs=("y",), dims=None, **attrs):
    """An Attention model and its feeds: q, k, v (and past) shapes; mask an array or None."""
    feeds = {"q": _normal(q), "k": _normal(k), "v": _normal(v)}
    names = ["q", "k", "v"]
    if mask is not None:
        feeds["mask"] = mask
        names.append("mask")
    if past is not None:
        names += [""] * (4 - len(names)) + ["past_key", "past_value"]
        feeds["past_key"], feeds["past_value"] = _normal(past[0]), _normal(past[1])
    node = helper.make_node("Attention", names, list(outputs), **attrs)
    inputs = [(n, list((dims or {}).get(n, feeds[n].shape)), feeds[n].dtype.type) for n in names if n]
    return _model(node, inputs, [o for o in outputs if o]), feeds


@pytest.mark.parametrize(
    "q,k,v,attrs",
    [
        ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}),
        ((2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 3), {"is_causal": 1}),  # GQA, head sizes differ
        ((1, 4, 3, 16), (1, 1, 3, 16), (1, 1, 3, 16), {"scale": 0.3}),  # MQA
        ((2, 4, 24), (2, 6, 24), (2, 6, 30), {"q_num_heads": 3, "kv_num_heads": 3}),  # 3-D
        ((2, 4, 72), (2, 6, 24), (2, 6, 12), {"q_num_heads": 9, "kv_num_heads": 3, "is_causal": 1}),
        ((1, 2, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8), {"softcap": 2.0}),
        ((1, 2, 40, 8), (1, 2, 300, 8), (1, 2, 300, 8), {"is_causal": 1}),  # rows longer than WG
    ],
)
def test_attention(q, k, v, attrs, tmp_path):
    onnx_model, feeds = _attention(q, k, v, **attrs)
    _check(onnx_model, feeds, tmp_path)


@pytest.mark.parametrize(
    "mask_shape,dtype",
    [
        ((4, 6), np.float32),
        ((2, 1, 4, 6), np.float32),  # broadcast over heads
        ((3, 4, 6), np.float32),  # a rank-3 mask: (heads, q, kv)
        ((2, 3, 4, 6), np.bool_),
        ((4, 6), np.bool_),
    ],
)
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_mask(mask_shape, dtype, causal, tmp_path):
    mask = RNG.random(mask_shape) < 0.7 if dtype == np.bool_ else _normal(mask_shape, 2)
    if dtype == np.bool_:
        mask.reshape(-1, mask_shape[-1])[:, 0] = True  # no row fully masked: onnxruntime gives NaN there
    onnx_model, feeds = _attention((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), mask=mask, is_causal=causal)
    _check(onnx_model, feeds, tmp_path)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_qk_output_and_present(mode, causal, tmp_path):
    # onnxruntime's mode-2 output leaves out the causal bias that the spec adds (the conformance
    # case ..._qk_matmul_bias_3d_mask_causal holds us to the spec): ONNX's reference judges that one.
    spec_only = mode == 2 and causal == 1
    mask = _normal((4, 18))
    onnx_model, feeds = _attention(
        (2, 3, 4, 8),
        (2, 3, 6, 8),
        (2, 3, 6, 10),
        mask=mask,
        past=((2, 3, 12, 8), (2, 3, 12, 10)),
        outputs=("y", "present_key", "present_value", "qk"),
        qk_matmul_output_mode=mode,
        softcap=3.0,
        is_causal=causal,
    )
    _check(onnx_model, feeds, tmp_path, onnx_reference=spec_only)


def test_attention_3d_with_past_and_only_present_value(tmp_path):
    # the keys go to a scratch buffer; onnxruntime needs present_key listed with a past
    shapes, past = ((2, 4, 24),) * 3, ((2, 3, 5, 8), (2, 3, 5, 8))
    heads = {"q_num_heads": 3, "kv_num_heads": 3}
    full, _ = _attention(*shapes, past=past, outputs=("y", "present_key", "present_value"), **heads)
    onnx_model, feeds = _attention(*shapes, past=past, outputs=("y", "", "present_value"), **heads)
    _check(onnx_model, feeds, tmp_path, reference_model=full)


def test_attention_present_without_past(tmp_path):
    onnx_model, feeds = _attention(
        (2, 4, 24), (2, 6, 24), (2, 6, 24), outputs=("y", "pk", "pv"), q_num_heads=3, kv_num_heads=3
    )
    _check(onnx_model, feeds, tmp_path)


def test_attention_symbolic_sequence(tmp_path):
    dims = {n: ["batch", 2, "seq", 8] for n in ("q", "k", "v")}
    onnx_model, _ = _attention((1, 2, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8), dims=dims, is_causal=1)
    for batch, seq in ((1, 3), (2, 5), (1, 3)):
        feeds = {n: _normal((batch, 2, seq, 8)) for n in "qkv"}
        (tmp_path / f"{batch}x{seq}").mkdir(exist_ok=True)
        _check(onnx_model, feeds, tmp_path / f"{batch}x{seq}")


@pytest.mark.parametrize(
    "attrs,why",
    [
        ({"softmax_precision": TensorProto.FLOAT16}, "softmax in float16"),
        ({"q_num_heads": 3, "kv_num_heads": 2}, "heads that do not group"),
    ],
)
def test_attention_refused_variants_stay_on_cpu(attrs, why):
    shapes = ((1, 2, 12), (1, 2, 12), (1, 2, 12)) if "q_num_heads" in attrs else ((1, 2, 2, 4),) * 3
    onnx_model, _ = _attention(*shapes, **attrs)
    assert _stays_on_cpu(onnx_model), why


def _rotary(shape, cache, attrs, with_ids=True):
    positions = 20
    half = cache
    init = [("cos", _normal((positions, half))), ("sin", _normal((positions, half)))]
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    if not with_ids:
        init = [("cos", _normal((batch, seq, half))), ("sin", _normal((batch, seq, half)))]
    names = ["x", "cos", "sin"] + (["ids"] if with_ids else [])
    inputs = [("x", list(shape), np.float32)] + ([("ids", [batch, seq], np.int64)] if with_ids else [])
    node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
    feeds = {"x": _normal(shape)}
    if with_ids:
        feeds["ids"] = RNG.integers(0, positions, (batch, seq)).astype(np.int64)
    return _model(node, inputs, ["y"], init), feeds


@pytest.mark.parametrize(
    "shape,cache,attrs,with_ids",
    [
        ((2, 4, 3, 8), 4, {}, True),
        ((2, 4, 3, 8), 4, {"interleaved": 1}, True),
        ((2, 3, 32), 4, {"num_heads": 4}, True),  # 3-D: heads side by side
        ((2, 3, 48), 2, {"num_heads": 4, "rotary_embedding_dim": 4, "interleaved": 1}, True),
        ((1, 2, 5, 16), 3, {"rotary_embedding_dim": 6}, False),  # a per-token cache
    ],
)
def test_rotary(shape, cache, attrs, with_ids, tmp_path):
    onnx_model, feeds = _rotary(shape, cache, attrs, with_ids)
    _check(onnx_model, feeds, tmp_path, rtol=1e-5, atol=1e-6)


def test_rotary_odd_rotary_dim_stays_on_cpu():
    onnx_model, _ = _rotary((1, 2, 3, 8), 2, {"rotary_embedding_dim": 5})
    assert _stays_on_cpu(onnx_model)


def test_fp16_storage(tmp_path):
    # precision=fp16: every buffer (scores and scratch caches included) holds half values
    from offload import runtime

    onnx_model, feeds = _attention(
        (1, 2, 3, 8),
        (1, 2, 3, 8),
        (1, 2, 3, 8),
        past=((1, 2, 4, 8), (1, 2, 4, 8)),
        outputs=("y", "present_key", "present_value"),
        is_causal=1,
    )
    feeds = {k: v.astype(np.float16).astype(np.float32) for k, v in feeds.items()}
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    lowered = offload.to_backend(
        offload.load(onnx_model.SerializeToString()),
        "opencl",
        compile_specs={"opencl": {"precision": "fp16", "mixed": "0"}},
        passes="none",
    )
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    got = runtime.load(str(tmp_path / "m.pte")).run(feeds)
    for w, g in zip(want, got.values()):
        np.testing.assert_allclose(g, w, rtol=5e-3, atol=5e-3)
