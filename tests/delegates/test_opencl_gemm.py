"""Every matmul.cl variant (naive, square tiles, register-blocked) on PoCL, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from offload.delegates.gpu.ops import linalg
from tests.reference import assert_close, sum_tolerance

from .opencl_support import check, model, needs_opencl, reference, run_on_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(11)


def _f(shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "matmul odd sizes": (
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [70, 33])],
        [("b", _f((33, 65)))],
    ),
    "batched broadcast": (
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", [2, 1, 67, 20])],
        [("b", _f((3, 20, 66)))],
    ),
    "gemm transposes and row bias": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        [("a", [19, 80])],
        [("b", _f((72, 19))), ("c", _f((72,)))],
    ),
    "fully connected at batch 1": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)],
        [("a", [1, 300])],
        [("b", _f((50, 300))), ("c", _f((50,)))],
    ),
    "gemm column bias": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"])],
        [("a", [3, 40])],
        [("b", _f((40, 130))), ("c", _f((3, 1)))],
    ),
}


@pytest.mark.parametrize("variant", list(linalg.VARIANTS))
@pytest.mark.parametrize("case", list(CASES))
def test_variant(case, variant, tmp_path, monkeypatch):
    nodes, inputs, init = CASES[case]
    monkeypatch.setattr(linalg, "variant_for", lambda b, g: variant)
    p = model(nodes, inputs, ["y"], init)
    feeds = {n: _f(s) for n, s in inputs}
    check(p, feeds, tmp_path, rtol=1e-4, atol=1e-4, whole=True)


@pytest.mark.parametrize("case", list(CASES))
def test_variants_agree_bit_for_bit(case, tmp_path, monkeypatch):
    """All variants add the products of k = 0 .. K-1 in order: the same bits."""
    nodes, inputs, init = CASES[case]
    p = model(nodes, inputs, ["y"], init)
    feeds = {n: _f(s) for n, s in inputs}
    results = {}
    for variant in linalg.VARIANTS:
        monkeypatch.setattr(linalg, "variant_for", lambda b, g, v=variant: v)
        results[variant] = run_on_opencl(p, feeds, tmp_path)[1]["y"]
    assert len({r.tobytes() for r in results.values()}) == 1, sorted(results)
    # the shared bits held to onnxruntime: a sum of K products (K at most A's longest side), plus
    # the bias
    k = max(max(a.shape) for a in feeds.values())
    assert_close(
        next(iter(results.values())), reference(p, feeds)["y"], rtol=sum_tolerance(np.float32, k + 1)
    )


class _Shape:
    max_local_size = 256
    tuning = "none"

    def const(self, v):
        return None


class _ConstantB(_Shape):
    """A builder whose value 1 (the B of the calls below) is a weight."""

    def const(self, v):
        return np.zeros(1, np.float32) if v == 1 else None


@pytest.mark.parametrize(
    "mnk,variant",
    [
        ((1, 1000, 512), "naive"),
        ((4, 64, 64), "naive"),
        ((16, 500, 300), "tile16"),
        ((512, 49, 4608), "blocked8"),
        ((96, 96, 64), "blocked"),
        ((32, 32, 32), "tile16"),
        ((256, 256, 64), "blocked8"),
    ],
)
def test_default_choice_by_shape(mnk, variant):
    M, N, K = mnk
    g = linalg.GemmCall(M, N, K, 0, 0, K, 1, 1, 0, N, 1, 2, 0)
    assert linalg.variant_for(_Shape(), g) == variant
    small = _Shape()
    small.max_local_size = 64  # a device whose work-groups hold 64 items
    assert linalg.VARIANTS[linalg.variant_for(small, g)][2] <= 64


@pytest.mark.parametrize(
    "mnk,variant",
    [
        ((1024, 1024, 1024), "packed6"),
        ((64, 3136, 576), "packed6"),
        ((4, 64, 64), "naive"),
        ((64, 1, 512), "naive"),
    ],
)
def test_a_cpu_device_gets_the_packed_kernel(mnk, variant):
    M, N, K = mnk
    g = linalg.GemmCall(M, N, K, 0, 0, K, 1, 1, 0, N, 1, 2, 0)
    cpu = _Shape()
    cpu.device_kind = "cpu"
    assert linalg.variant_for(cpu, g) == variant
    assert linalg.VARIANTS[linalg.variant_for(_Shape(), g)][0] != "gemm_packed"  # a GPU never does


def test_a_cpu_device_runs_a_row_times_a_constant_as_a_gemv():
    cpu, constant = _Shape(), _ConstantB()
    cpu.device_kind = constant.device_kind = "cpu"
    g = linalg.GemmCall(1, 4096, 9216, 0, 0, 9216, 1, 1, 0, 1, 9216, 2, 0)
    assert linalg.variant_for(constant, g) == "packed1"
    assert linalg.variant_for(cpu, g) == "naive"  # B computed: packing it each run would not pay
    assert linalg.variant_for(constant, linalg.GemmCall(1, 8, 64, 0, 0, 64, 1, 1, 0, 8, 1, 2, 0)) == "naive"


def test_constant_operands_are_packed_once_at_init(tmp_path):
    """A constant A or B reaches the packed kernel as panels packed on the host at init: no
    pack launch runs for it."""
    from offload.delegates.opencl import runtime as cl_runtime

    from .opencl_support import plan_and_handle, specialized

    p = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [16, 24])], ["y"], [("b", _f((24, 32)))]
    )
    _, handle = plan_and_handle(p)
    names = [launch.kernel.function_name for launch in specialized(handle).launches]
    cl_runtime.OpenCLRuntime().destroy(handle)
    if handle.device.device.type & cl_runtime.cl.device_type.CPU:
        assert names == ["gemm_pack_a", "gemm_packed"]


def test_host_packing_matches_the_pack_kernels():
    a, bm = _f((7, 5)), _f((5, 20))
    ap, bp = linalg.pack_a(a, 6), linalg.pack_b(bm)
    for p in range(2):
        for k in range(5):
            for i in range(6):
                want = a[p * 6 + i, k] if p * 6 + i < 7 else 0.0
                assert ap[(p * 5 + k) * 6 + i] == want
    for q in range(2):
        for k in range(5):
            for j in range(16):
                want = bm[k, q * 16 + j] if q * 16 + j < 20 else 0.0
                assert bp[(q * 5 + k) * 16 + j] == want


def test_the_opencl_builder_says_what_kind_its_device_is(tmp_path, monkeypatch):
    from offload.delegates.opencl import runtime as cl_runtime

    seen, original = [], linalg.variant_for

    def spy(b, g):
        seen.append(b.device_kind)
        return original(b, g)

    monkeypatch.setattr(linalg, "variant_for", spy)
    p = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [16, 24])], ["y"], [("b", _f((24, 32)))]
    )
    run_on_opencl(p, {"a": _f((16, 24))}, tmp_path)
    dev = cl_runtime.device_for(None).device
    assert seen and set(seen) == {"cpu" if dev.type & cl_runtime.cl.device_type.CPU else "gpu"}
