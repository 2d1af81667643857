"""Symbolic shapes on the `opencl` backend: partitions specialized per input signature, on PoCL.

Every model here has symbolic dims; each runs whole on opencl for several input shapes (a shape
met before among them) and is compared with onnxruntime on the same ONNX model.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.delegates import registry
from offload.delegates.backend import CompileSpec
from offload.errors import ShapeError

from .opencl_support import RT, model, needs_opencl, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(7)


def _module(program, tmp_path, specs=None):
    lowered = offload.to_backend(program, "opencl", compile_specs={"opencl": specs or []}, passes="none")
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    module = runtime.load(str(path))
    assert all(d[:2] == ("opencl", "backend") for d in module.method("forward").delegates)
    return module


def _handle(module):
    (delegate,) = module.method("forward")._delegates.values()
    return delegate.handle


def _check_shapes(program, tmp_path, feeds_list, rtol=1e-4, atol=1e-5, specs=None):
    """Runs ``program`` whole on opencl for each feeds in turn; each result against onnxruntime."""
    module = _module(program, tmp_path, specs)
    for feeds in feeds_list:
        got, want = module.run(feeds), reference(program, feeds)
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].shape, v.shape)
            np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol)
    return module


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_a_symbolic_batch_specializes_once_per_shape(tmp_path):
    w = _x(6, 4)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["y"]),
    ]
    p = model(nodes, [("x", ["N", 6])], ["y"], [("w", w)])
    module = _check_shapes(p, tmp_path, [{"x": _x(n, 6)} for n in (3, 1, 7, 3, 1)])
    stats = _handle(module).specializations.stats
    assert (stats.built, stats.hits) == (3, 2)


def test_a_cnn_with_symbolic_batch_and_image_size(tmp_path):
    w, b = _x(8, 3, 3, 3) * 0.3, _x(8)
    fc, fb = _x(8, 5), _x(5)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"]),
    ]
    p = model(nodes, [("x", ["N", 3, "H", "W"])], ["y"], [("w", w), ("b", b), ("fc", fc), ("fb", fb)])
    shapes = [(1, 3, 16, 16), (2, 3, 12, 20), (1, 3, 9, 7), (1, 3, 16, 16)]
    _check_shapes(p, tmp_path, [{"x": _x(*s)} for s in shapes])


def test_a_shape_chain_is_folded_on_the_host(tmp_path):
    # x.view(x.shape[0], -1) as exporters write it: Shape → Gather → Unsqueeze → Concat → Reshape
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("ReduceSum", ["flat", "one"], ["y"], keepdims=0),
    ]
    consts = [
        ("zero", np.array(0, np.int64)),
        ("zero1", np.array([0], np.int64)),
        ("minus1", np.array([-1], np.int64)),
        ("one", np.array([1], np.int64)),
    ]
    p = model(nodes, [("x", ["N", "C", 4])], ["y"], consts)
    module = _check_shapes(p, tmp_path, [{"x": _x(*s)} for s in [(2, 3, 4), (5, 1, 4), (2, 3, 4)]])
    plan = _handle(module).plan
    assert not plan["host_inputs"]  # everything the shapes need is computed from x's shape


def test_resize_to_the_size_of_another_input(tmp_path):
    # A segmentation head: upsample features back to the image's H, W (sizes from Shape ops)
    nodes = [
        helper.make_node("Shape", ["image"], ["s"]),
        helper.make_node("Slice", ["s", "two", "four"], ["hw"]),
        helper.make_node("Shape", ["feat"], ["fs"]),
        helper.make_node("Slice", ["fs", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["feat", "", "", "sizes"], ["y"], mode="linear"),
    ]
    consts = [(k, np.array([v], np.int64)) for k, v in (("zero", 0), ("two", 2), ("four", 4))]
    p = model(nodes, [("image", ["N", 3, "H", "W"]), ("feat", ["N", 2, "h", "w"])], ["y"], consts)
    cases = [((1, 3, 16, 16), (1, 2, 4, 4)), ((2, 3, 20, 12), (2, 2, 5, 3)), ((1, 3, 16, 16), (1, 2, 4, 4))]
    _check_shapes(p, tmp_path, [{"image": _x(*a), "feat": _x(*b)} for a, b in cases])


def test_attention_with_a_symbolic_sequence_length_and_a_mask(tmp_path):
    d, heads = 8, 2
    wq, wk, wv = _x(d, d), _x(d, d), _x(d, d)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        # [B, S, D] → [B, S, H, D/H] → [B, H, S, D/H], the split shape taken from x's shape
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Slice", ["xs", "zero", "two"], ["bs"]),
        helper.make_node("Concat", ["bs", "hd"], ["split"], axis=0),
        *[helper.make_node("Reshape", [t, "split"], [f"{t}4"]) for t in "qkv"],
        *[helper.make_node("Transpose", [f"{t}4"], [f"{t}t"], perm=[0, 2, 1, 3]) for t in "qv"],
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        # mask [B, S] of 0/1 → additive [B, 1, 1, S]
        helper.make_node("Sub", ["one", "mask"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias"]),
        helper.make_node("Unsqueeze", ["bias", "axes12"], ["bias4"]),
        helper.make_node("Add", ["scaled", "bias4"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "vt"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctxt", "bsd"], ["y"]),
    ]
    consts = [
        ("wq", wq),
        ("wk", wk),
        ("wv", wv),
        ("zero", np.array([0], np.int64)),
        ("two", np.array([2], np.int64)),
        ("hd", np.array([heads, d // heads], np.int64)),
        ("scale", np.array(1 / np.sqrt(d // heads), np.float32)),
        ("one", np.array(1, np.float32)),
        ("neg", np.array(-1e4, np.float32)),
        ("axes12", np.array([1, 2], np.int64)),
        ("bsd", np.array([0, 0, d], np.int64)),
    ]
    p = model(nodes, [("x", ["B", "S", d]), ("mask", ["B", "S"])], ["y"], consts)

    def feeds(b, s):
        mask = np.ones((b, s), np.float32)
        mask[0, s // 2 :] = 0  # the first sequence is padded
        return {"x": _x(b, s, d), "mask": mask}

    _check_shapes(p, tmp_path, [feeds(2, 5), feeds(1, 9), feeds(3, 2), feeds(2, 5)])


def test_shape_deciding_graph_inputs_are_read_on_the_host(tmp_path):
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"]),
        helper.make_node("ReduceMean", ["s", "raxes"], ["y"], keepdims=1),
    ]
    inputs = [("x", [4, 6]), *[(n, [1], np.int64) for n in ("starts", "ends", "axes", "raxes")]]
    p = model(nodes, [*inputs, ("shape", [2], np.int64)], ["y"])

    def feeds(shape, start, end, axis, raxis):
        ints = {"starts": start, "ends": end, "axes": axis, "raxes": raxis}
        return {
            "x": _x(4, 6),
            "shape": np.array(shape, np.int64),
            **{k: np.array([v]) for k, v in ints.items()},
        }

    module = _check_shapes(
        p,
        tmp_path,
        [
            feeds([3, 8], 1, 3, 0, 1),
            feeds([2, 12], 0, -1, 1, 0),
            feeds([3, 8], 1, 3, 0, 1),
            feeds([3, 8], 0, 2, 1, 1),
        ],
    )
    plan = _handle(module).plan
    assert len(plan["host_inputs"]) == 5
    assert _handle(module).specializations.stats.built == 3  # new values, new signature


def test_max_shapes_bounds_the_cache(tmp_path):
    p = model([helper.make_node("Tanh", ["x"], ["y"])], [("x", ["N"])], ["y"])
    module = _check_shapes(
        p, tmp_path, [{"x": _x(n)} for n in (1, 2, 3, 1)], specs=[CompileSpec.of("max_shapes", "2")]
    )
    stats = _handle(module).specializations.stats
    assert (stats.built, stats.hits, stats.evicted) == (4, 0, 2)  # 1 was evicted by 3
    assert len(_handle(module).specializations.entries) == 2


def test_the_shapes_spec_specializes_at_init(tmp_path):
    p = model([helper.make_node("Tanh", ["x"], ["y"])], [("x", ["N", 3])], ["y"])
    sets = json.dumps([{"x": [2, 3]}, {"x": [5, 3]}, {"other_model_input": [1]}])
    module = _module(p, tmp_path, [CompileSpec.of("shapes", sets)])
    stats = _handle(module).specializations.stats
    assert stats.built == 2  # the set naming no input of this partition is skipped
    for n in (2, 5):
        x = _x(n, 3)
        np.testing.assert_allclose(module.run({"x": x})["y"], np.tanh(x), rtol=1e-6, atol=1e-6)
    assert (stats.built, stats.hits) == (2, 2)


def test_bad_shape_specs_are_refused():
    p = model([helper.make_node("Tanh", ["x"], ["y"])], [("x", ["N", 3])], ["y"])
    for key, value in [("max_shapes", "0"), ("shapes", "[[1, 2]]"), ("shapes", "not json")]:
        with pytest.raises(offload.errors.OffloadError, match=key if key == "max_shapes" else "shapes"):
            offload.to_backend(
                p, "opencl", compile_specs={"opencl": [CompileSpec.of(key, value)]}, passes="none"
            )


def test_an_input_that_breaks_a_symbol_is_a_shape_error(tmp_path):
    p = model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", ["N", 3]), ("b", ["N", 3])], ["y"])
    module = _module(p, tmp_path)
    got = module.run({"a": _x(2, 3), "b": _x(2, 3)})["y"]
    assert got.shape == (2, 3)
    plan, handle = _handle(module).plan, _handle(module)
    with pytest.raises(ShapeError, match="N=2"):
        RT.execute(handle, [_x(2, 3), _x(4, 3)])
    assert plan["shapes"][str(plan["inputs"][0])] == ["N", 3]


def test_a_shape_past_int32_indexing_runs_that_call_on_the_cpu(tmp_path, monkeypatch):
    from offload.delegates.gpu import builder

    p = model([helper.make_node("Neg", ["x"], ["y"])], [("x", ["N"])], ["y"])
    module = _module(p, tmp_path)
    monkeypatch.setattr(builder, "MAX_ELEMENTS", 100)  # stands for 2**31 - 1
    small, large = _x(100), _x(101)
    np.testing.assert_array_equal(module.run({"x": small})["y"], -small)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(module.run({"x": large})["y"], -large)
    assert any("int32" in str(w.message) and "CPU fallback" in str(w.message) for w in seen)


def test_data_dependent_shapes_stay_on_the_cpu_with_the_reason():
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("ReduceMax", ["nz", "one"], ["m"], keepdims=0),
        helper.make_node("Expand", ["x", "m"], ["y"]),
    ]
    p = model(nodes, [("x", [3])], ["y"], [("one", np.array([1], np.int64))])
    assert p.main.body.operations[-1].outputs[0].type.rank == 1
    expand = p.main.body.operations[-1]
    support = registry.get("opencl").compiler().supports(expand)
    assert not support and "data-dependent" in support.reason and "ReduceMax" in support.reason


def test_evicting_a_specialization_keeps_the_weights_its_views_share(tmp_path):
    # Identity of a weight is a view of the weight's buffer: evicting the specialization that
    # holds the view must leave the buffer to the handle (and later specializations).
    w = _x(4)
    nodes = [helper.make_node("Identity", ["w"], ["v"]), helper.make_node("Add", ["x", "v"], ["y"])]
    p = model(nodes, [("x", ["N", 4])], ["y", "v"], [("w", w)])
    module = _check_shapes(
        p, tmp_path, [{"x": _x(n, 4)} for n in (1, 2, 3, 1)], specs=[CompileSpec.of("max_shapes", "1")]
    )
    assert _handle(module).specializations.stats.evicted == 3
    module.close()


def test_a_pool_window_past_the_work_budget_is_refused_when_it_specializes(tmp_path):
    """A 2,049 x 2,049 window over symbolic sizes: import cannot count its work, the plan does when
    a run brings 8 x 8 (4.2 million taps over 128 outputs); a 3 x 3 window of the same model
    specializes and matches onnxruntime."""
    for k, pad in ((3, 1), (2049, 1024)):
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], pads=[pad] * 4)
        program = model([node], [("x", ["N", 2, "H", "W"])], ["y"])
        lowered = offload.to_backend(program, "opencl", passes="none")
        module = runtime.load(offload.save(lowered), strict=True)  # strict: no CPU fallback
        x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
        if k == 3:
            np.testing.assert_allclose(
                module.run({"x": x})["y"], reference(program, {"x": x})["y"], rtol=1e-6
            )
            continue
        start = time.monotonic()
        with pytest.raises(ShapeError, match=r"MaxPool: a window of 4198401 taps .* over 128 outputs"):
            module.run({"x": x})
        assert time.monotonic() - start < 1
