"""Launches, waits and copies of one run of a small conv net on the GPU backends, and its values.

The net: a 3x3 Conv + bias + Relu, a grouped 1x1 Conv + Relu, a depthwise Conv + Relu, a 1x1 Conv
and a residual Add + Relu. Each Relu after a Conv runs in that Conv's kernel (``gpu/epilogue.py``),
the grouped Conv's groups run as one batch of GEMMs. Counts are structural: what the shared
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
    init = [("w1", _w(16, 8, 3, 3)), ("b1", _w(16, 1)[:, 0]), ("w2", _w(16, 4, 1, 1)), ("b2", _w(16, 1)[:, 0])]
    init += [("w3", _w(16, 1, 3, 3)), ("b3", _w(16, 1)[:, 0]), ("w4", _w(16, 16, 1, 1))]
    return model(nodes, [("x", [1, 8, 12, 12])], ["y"], init)


def _plan_and_host(program):
    lowered = offload.to_backend(program, "opencl", passes="none")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan = json.loads(d.attributes["processed"])
    constants = d.attributes["fallback"].constants
    return plan, {int(i): constants[n].const_value for i, n in plan["weights"].items()}


def test_each_relu_after_a_conv_is_its_epilogue_and_the_residual_relu_is_not():
    plan, _ = _plan_and_host(_net())
    steps = [(s["type"], s.get("epilogue")) for s in plan["ops"]]
    assert steps == [("Conv", "Relu")] * 3 + [("Conv", None), ("Fused", None)]
    assert [n["type"] for n in plan["ops"][-1]["nodes"]] == ["Add", "Relu"]


@pytest.mark.parametrize("blas", [False, True], ids=["opencl-gpu", "cuda"])
def test_a_gpu_runs_the_net_within_the_launch_target(blas):
    plan, host = _plan_and_host(_net())
    b = record(plan, host, blas=blas, device_kind="gpu")
    launches = len(b.launches) + len(b.gemms)
    # 3x3: im2col + GEMM; grouped 1x1: one batched GEMM; depthwise: one; 1x1: one; Add + Relu: one
    assert launches == 6 <= TARGET * CONVS, [r.kernel for r in b.launches]
    assert "add_bias" not in {r.kernel for r in b.launches}


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
    assert types == ([("Conv", None), ("Relu", None)] if extra_output else [("Conv", "Relu")])
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    check(program, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)

