"""Launches, waits and copies of one run of a small conv net on the GPU backends, and its values.

The net: a 3x3 Conv + bias + Relu, a grouped 1x1 Conv + Relu, a depthwise Conv + Relu, a 1x1 Conv
and a residual Add + Relu. Each Relu and the residual Add after a Conv run in that Conv's kernel
(``gpu/epilogue.py``), the grouped Conv's groups run as one batch of GEMMs. Counts are structural: what the shared
launchers record for a GPU device without a BLAS (opencl), with cuBLAS (cuda), and what PoCL's
opencl device really ran (its ``Traffic`` counters); values against onnxruntime.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates.cuda.record import record
from offload.delegates.gpu.plan import parse
from offload.delegates.opencl.runtime import OpenCLRuntime

from .opencl_support import check, device_kind, model, needs_opencl, plan_and_handle, reference

RNG = np.random.default_rng(11)
CONVS = 4
TARGET = 1.5  # launches per run at most this many times the Convs


def _w(*shape):
    """Weights of He scale, so that values neither vanish nor grow through the layers."""
    fan_in = int(np.prod(shape[1:]))
    return (RNG.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _net():
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], group=4),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4"], ["c4"]),
        helper.make_node("Add", ["c4", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    init = [
        ("w1", _w(16, 8, 3, 3)),
        ("b1", _w(16, 1)[:, 0]),
        ("w2", _w(16, 4, 1, 1)),
        ("b2", _w(16, 1)[:, 0]),
    ]
    init += [("w3", _w(16, 1, 3, 3)), ("b3", _w(16, 1)[:, 0]), ("w4", _w(16, 16, 1, 1))]
    return model(nodes, [("x", [1, 8, 12, 12])], ["y"], init)


def _plan_and_host(program):
    lowered = offload.to_backend(program, "opencl", passes="none")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan = json.loads(d.attributes["processed"])
    constants = d.attributes["fallback"].constants
    return plan, {int(i): constants[n].const_value for i, n in plan["weights"].items()}


def test_each_relu_and_the_residual_add_after_a_conv_are_its_epilogue():
    plan, _ = _plan_and_host(_net())
    steps = [(s["type"], s.get("epilogue")) for s in plan["ops"]]
    assert steps == [("Conv", ["Relu"])] * 3 + [("Conv", ["Add", "Relu"])]
    assert plan["ops"][-1]["residual"] == plan["ops"][0]["outputs"][0]


def test_under_fp16_storage_the_residual_add_stays_a_step_of_its_own():
    lowered = offload.to_backend(_net(), "opencl", {"opencl": {"precision": "fp16"}}, passes="none")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan = json.loads(d.attributes["processed"])
    steps = [(s["type"], s.get("epilogue")) for s in plan["ops"]]
    assert steps == [("Conv", ["Relu"])] * 3 + [("Conv", None), ("Fused", None)]


@pytest.mark.parametrize("blas", [False, True], ids=["opencl-gpu", "cuda"])
def test_a_gpu_runs_the_net_within_the_launch_target(blas):
    plan, host = _plan_and_host(_net())
    b = record(plan, host, blas=blas, device_kind="gpu")
    launches = len(b.launches) + len(b.gemms)
    # 3x3: one implicit GEMM; grouped 1x1: one batched GEMM; depthwise: one; 1x1 + Add + Relu: one
    assert launches == 4 <= TARGET * CONVS, [r.kernel for r in b.launches]
    assert {"add_bias", "add_residual", "ew"}.isdisjoint(r.kernel for r in b.launches)


@needs_opencl
def test_the_net_matches_onnxruntime(tmp_path):
    program = _net()
    feeds = {"x": RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    check(program, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


@needs_opencl
def test_a_run_launches_what_the_plan_records_waits_once_and_copies_only_inputs_and_outputs():
    program = _net()
    plan, handle = plan_and_handle(program)
    rt = OpenCLRuntime()
    try:
        x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
        rt.execute(handle, [x])  # a first run, as any later one
        traffic = handle.device.allocator.traffic
        before = traffic.snapshot()
        (y,) = rt.execute(handle, [x])
        after = traffic.snapshot()
    finally:
        rt.destroy(handle)
    _, host = _plan_and_host(program)
    kind = device_kind()
    recorded = record(plan, host, device_kind=kind).launches
    assert after.launches - before.launches == len(recorded)
    assert after.syncs - before.syncs == 1
    assert (after.to_device - before.to_device, after.to_host - before.to_host) == (x.nbytes, y.nbytes)
    np.testing.assert_allclose(y, reference(program, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def _conv_relu(extra_output: bool):
    """Conv + Relu where the Conv's output is also a model output (``extra_output``) or not."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    init = [("w", _w(4, 3, 3, 3)), ("b", _w(4, 1)[:, 0])]
    return model(nodes, [("x", [1, 3, 6, 6])], ["y", "c"] if extra_output else ["y"], init)


@needs_opencl
@pytest.mark.parametrize("extra_output", [False, True], ids=["fused", "conv-output-read-too"])
def test_a_conv_whose_output_is_read_elsewhere_keeps_its_relu_apart(extra_output, tmp_path):
    program = _conv_relu(extra_output)
    plan, _ = _plan_and_host(program)
    types = [(s["type"], s.get("epilogue")) for s in plan["ops"]]
    assert types == ([("Conv", None), ("Relu", None)] if extra_output else [("Conv", ["Relu"])])
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    check(program, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


def _blocks(residual_read_later: bool, residual_a_view: bool = False):
    """Two ResNet identity blocks in a row, two 3x3 Convs each (the second block adds into the
    buffer the first wrote in place); ``residual_read_later``: the first block's input is also added to the output, after the
    blocks (so no Conv may write into it); ``residual_a_view``: the first residual is a Reshape of
    a value read after the blocks."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
    ]
    first = "r0"
    if residual_a_view:
        nodes += [helper.make_node("Reshape", ["r0", "shape"], ["v0"])]
        first = "v0"
    for k, src in enumerate([first, "z0"]):
        nodes += [
            helper.make_node("Conv", [src, f"a{k}"], [f"p{k}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"p{k}"], [f"q{k}"]),
            helper.make_node("Conv", [f"q{k}", f"w{k + 1}", f"b{k + 1}"], [f"c{k + 1}"], pads=[1, 1, 1, 1]),
            helper.make_node("Sum" if k else "Add", [src, f"c{k + 1}"], [f"s{k}"]),
            helper.make_node("Relu", [f"s{k}"], [f"z{k}"]),
        ]
    out = "z1"
    if residual_read_later or residual_a_view:
        nodes.append(helper.make_node("Add", ["z1", "r0"], ["y"]))
        out = "y"
    else:
        nodes.append(helper.make_node("Identity", ["z1"], ["y"]))
    init = [("w0", _w(8, 4, 3, 3)), ("w1", _w(8, 8, 3, 3)), ("b1", _w(8, 1)[:, 0])]
    init += [("w2", _w(8, 8, 3, 3)), ("b2", _w(8, 1)[:, 0]), ("shape", np.array([1, 8, 6, 6], np.int64))]
    init += [("a0", _w(8, 8, 3, 3)), ("a1", _w(8, 8, 3, 3))]
    return model(nodes, [("x", [1, 4, 6, 6])], [out], init)


@needs_opencl
@pytest.mark.parametrize(
    "read_later,view,fused,kernel",
    [
        (False, False, 2, None),  # chained in place: no launch but the Convs'
        (True, False, 1, None),  # r0 read after the blocks: its Add stays a step
        (False, True, 2, "add_residual"),  # r0's buffer is shared by a view: added by one launch
    ],
    ids=["in-place-chain", "residual-read-later", "residual-a-view"],
)
def test_residual_blocks_match_onnxruntime(read_later, view, fused, kernel, tmp_path):
    program = _blocks(read_later, view)
    plan, host = _plan_and_host(program)
    assert sum(s.get("epilogue") == ["Add", "Relu"] for s in plan["ops"]) == fused
    kernels = {r.kernel for r in record(plan, host, device_kind=device_kind()).launches}
    assert (kernel in kernels) if kernel else "add_residual" not in kernels
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    check(program, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


@pytest.mark.parametrize(
    "change",
    [{"epilogue": ["Sigmoid"]}, {"epilogue": ["Add", "Relu"]}, {"residual": 0}, {"type": "Relu"}],
    ids=["unknown-activation", "add-without-residual", "residual-without-add", "not-a-conv"],
)
def test_a_damaged_epilogue_is_a_model_format_error(change):
    plan, _ = _plan_and_host(_net())
    plan["ops"][0].update(change)
    with pytest.raises(offload.errors.ModelFormatError, match="epilogue"):
        parse(json.dumps(plan).encode(), "opencl")


@needs_opencl
def test_a_residual_read_by_an_elementwise_tree_that_runs_later_is_not_overwritten(tmp_path):
    """r0 is read by a Mul whose fused tree runs at the last Add, after the block: the block's Add
    stays out of its Conv (which would have written into r0 first)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Mul", ["r0", "k"], ["m"]),
        helper.make_node("Conv", ["r0", "a0"], ["p"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["p"], ["q"]),
        helper.make_node("Conv", ["q", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["r0", "c1"], ["s"]),
        helper.make_node("Relu", ["s"], ["z"]),
        helper.make_node("Add", ["m", "z"], ["y"]),
    ]
    init = [("w0", _w(8, 4, 3, 3)), ("a0", _w(8, 8, 3, 3)), ("w1", _w(8, 8, 3, 3)), ("b1", _w(8, 1)[:, 0])]
    program = model(nodes, [("x", [1, 4, 6, 6])], ["y"], init + [("k", np.float32(0.5))])
    plan, _ = _plan_and_host(program)
    assert [s.get("epilogue") for s in plan["ops"] if s["type"] == "Conv"] == [["Relu"], ["Relu"], None]
    feeds = {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    check(program, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)
