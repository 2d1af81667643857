"""Device memory of an OpenCL partition: intermediates share pooled buffers by lifetime."""

from __future__ import annotations

import numpy as np
from onnx import helper

from offload.delegates.gpu.ops import linalg

from .opencl_support import check, model, needs_opencl, plan_and_handle, specialized

pytestmark = needs_opencl
RNG = np.random.default_rng(4)


def _chain(n: int):
    """x → MatMul → MatMul → … (n of them): each intermediate is read by the next op only."""
    names = ["x", *(f"t{i}" for i in range(1, n)), "y"]
    nodes = [helper.make_node("MatMul", [names[i], f"w{i}"], [names[i + 1]]) for i in range(n)]
    init = [(f"w{i}", RNG.standard_normal((16, 16)).astype(np.float32) / 4) for i in range(n)]
    return model(nodes, [("x", [8, 16])], ["y"], init)


def test_intermediates_reuse_buffers_and_results_hold(tmp_path, monkeypatch):
    # one launch per MatMul (a packed GEMM, the CPU devices' default, first copies t(i) into
    # panels, after which t(i+1) may take t(i)'s own buffer: see the test below)
    monkeypatch.setattr(linalg, "variant_for", lambda b, g: "tile16")
    p = _chain(6)
    check(
        p, {"x": RNG.standard_normal((8, 16)).astype(np.float32)}, tmp_path, rtol=1e-5, atol=1e-5, whole=True
    )
    plan, h = plan_and_handle(p)
    try:
        inner = [op["outputs"][0] for op in plan["ops"][:-1]]  # t1 … t5
        assert len(inner) == 5
        buffers = {id(specialized(h).buffers[v]) for v in inner}
        # t(i) is last read by the step writing t(i+1): two buffers alternate
        assert len(buffers) == 2
        pinned = {
            id(specialized(h).buffers[v])
            for v in [*specialized(h).inputs, *specialized(h).outputs, *map(int, plan["weights"])]
        }
        assert not buffers & pinned  # inputs, outputs and weights are never lent out
    finally:
        from offload.delegates.opencl.runtime import OpenCLRuntime

        OpenCLRuntime().destroy(h)


def test_a_packed_gemm_lets_its_output_take_its_input_buffer(tmp_path, monkeypatch):
    """pack A reads t(i) into a scratch panel before the product writes t(i+1): t(i) is free by
    then, so the whole chain runs in one pooled buffer, with the same results."""
    monkeypatch.setattr(linalg, "variant_for", lambda b, g: "packed6")
    p = _chain(6)
    check(
        p, {"x": RNG.standard_normal((8, 16)).astype(np.float32)}, tmp_path, rtol=1e-5, atol=1e-5, whole=True
    )
    plan, h = plan_and_handle(p)
    try:
        inner = [op["outputs"][0] for op in plan["ops"][:-1]]
        assert len({id(specialized(h).buffers[v]) for v in inner}) == 1
    finally:
        from offload.delegates.opencl.runtime import OpenCLRuntime

        OpenCLRuntime().destroy(h)


def test_a_value_read_later_keeps_its_buffer(tmp_path):
    """t1 is read again at the end (a skip connection): nothing may overwrite it before then."""
    w = [RNG.standard_normal((16, 16)).astype(np.float32) / 4 for _ in range(3)]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["t1"]),
        helper.make_node("MatMul", ["t1", "w1"], ["t2"]),
        helper.make_node("MatMul", ["t2", "w2"], ["t3"]),
        helper.make_node("Add", ["t3", "t1"], ["y"]),
    ]
    p = model(nodes, [("x", [8, 16])], ["y"], [(f"w{i}", a) for i, a in enumerate(w)])
    check(
        p, {"x": RNG.standard_normal((8, 16)).astype(np.float32)}, tmp_path, rtol=1e-5, atol=1e-5, whole=True
    )
