"""The `cuda` backend: specs, blob, launch shapes and binary choice here; its kernels on a GPU with ``-m cuda``.

Without a CUDA device (every machine of this project's CI) the unit tests run and a lowered
program runs through its CPU fallback; ``pytest -m cuda`` on a GPU machine runs the same models
as the opencl tests on the device, against onnxruntime.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.delegates import registry
from offload.delegates.backend import CompileSpec, CompileSpecError
from offload.delegates.cuda import blob, nvrtc
from offload.delegates.cuda.device import DEFAULT_BLOCK, launch_shape
from offload.delegates.cuda.record import record
from offload.delegates.cuda.source import cuda_source, kernel_key, nvrtc_options
from offload.errors import KernelError, ModelFormatError

from .opencl_support import model, overflowing, reference

RT = registry.get("cuda").runtime()
AVAILABLE = RT.is_available()
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason=nvrtc.IMPORT_ERROR)
RNG = np.random.default_rng(7)


def _mlp():
    w = RNG.standard_normal((4, 5)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1]),
    ]
    return model(nodes, [("x", [2, 3, 4])], ["y"], [("w", w)])


def _delegate(lowered):
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    return d


# ---- launch shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "global_size,local_size,grid,block",
    [
        ((1000,), None, (4, 1, 1), (DEFAULT_BLOCK, 1, 1)),
        ((256,), None, (1, 1, 1), (256, 1, 1)),
        ((1,), None, (1, 1, 1), (256, 1, 1)),
        ((48, 32), (16, 16), (3, 2, 1), (16, 16, 1)),
        ((50, 33), (16, 16), (4, 3, 1), (16, 16, 1)),  # rounded up: kernels bound-check
        ((10, 7), None, (1, 7, 1), (256, 1, 1)),
        ((8, 4, 6), (2, 2, 2), (4, 2, 3), (2, 2, 2)),
        ((2**31 - 1,), (1,), (2**31 - 1, 1, 1), (1, 1, 1)),
    ],
)
def test_launch_shape_maps_opencl_sizes_to_grid_and_block(global_size, local_size, grid, block):
    assert launch_shape(global_size, local_size) == (grid, block)


@pytest.mark.parametrize(
    "global_size,local_size",
    [
        ((64,), (2048,)),  # more threads than a block holds
        ((64, 64), (64, 32)),
        ((8, 8, 128), (1, 1, 128)),  # block z above 64
        ((16, 16), (16,)),  # ranks differ
        ((1, 1, 1, 1), None),  # no 4th dimension
        ((1, 70000 * 256), None),  # grid y above 65535
        ((4,), (0,)),
    ],
)
def test_launch_shape_refuses_what_cuda_cannot_launch(global_size, local_size):
    with pytest.raises(KernelError):
        launch_shape(global_size, local_size)


# ---- sources and options ------------------------------------------------------------------------


def test_build_options_become_macros_after_the_prelude():
    text = cuda_source("__kernel void k() {}", "-DT=long -D TS=16 -DFLAG -UOLD -cl-fast-relaxed-math")
    prelude_end = text.index('#line 1 "kernel.cl"')
    macros = text[text.index("#endif", text.index("#define inline")) : prelude_end]
    for line in ("#define T long", "#define TS 16", "#define FLAG 1", "#undef OLD"):
        assert line in macros
    assert nvrtc_options("-DT=long -I /some/dir -cl-mad-enable") == ("-I/some/dir",)
    with pytest.raises(KernelError, match="--use_fast_math"):
        nvrtc_options("--use_fast_math")


def test_kernel_key_names_source_and_options():
    assert kernel_key("a", "-DT=float") == kernel_key("a", "-DT=float")
    assert len({kernel_key("a", ""), kernel_key("b", ""), kernel_key("a", "-DT=int")}) == 3


# ---- blob ---------------------------------------------------------------------------------------


def _bins():
    return [
        blob.Binary("k1", "sm_80", "cubin", b"\x7fELF-80"),
        blob.Binary("k1", "sm_86", "cubin", b"\x7fELF-86"),
        blob.Binary("k1", "sm_90", "cubin", b"\x7fELF-90"),
        blob.Binary("k1", "sm_90a", "cubin", b"\x7fELF-90a"),
        blob.Binary("k1", "sm_90", "ptx", b".version 8.8 .target sm_90"),
        blob.Binary("k2", "sm_80", "cubin", b""),  # empty binaries survive the round trip too
    ]


def test_blob_round_trip():
    plan = {"format": "offload-gpu-plan/3", "ops": [], "weights": {"1": "w"}}
    data = blob.pack(plan, _bins())
    assert data.startswith(blob.MAGIC)
    assert blob.unpack(data) == (plan, _bins())
    assert blob.unpack(blob.pack(plan)) == (plan, [])
    assert blob.unpack(json.dumps(plan).encode()) == (plan, [])  # a bare plan is a blob


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda d: d[:10], "header length"),
        (lambda d: d[:40], "header needs"),
        (lambda d: d[:-3], "outside the blob"),
        (lambda d: b"not a blob at all", "neither"),
        (lambda d: d.replace(b'"sm_86"', b'"xx_86"'), "architecture"),
        (lambda d: d.replace(b'"binaries"', b'"binariez"'), "bad blob header"),
    ],
)
def test_a_damaged_blob_is_a_model_format_error(damage, match):
    data = blob.pack({"format": "offload-gpu-plan/3"}, _bins()[:5])
    with pytest.raises(ModelFormatError, match=match):
        blob.unpack(damage(data))


@pytest.mark.parametrize(
    "cc,want",
    [
        ((8, 0), ("sm_80", "cubin")),
        ((8, 6), ("sm_86", "cubin")),
        ((8, 9), ("sm_86", "cubin")),  # same major, higher minor: the newest cubin not above it
        ((9, 0), ("sm_90", "cubin")),  # the portable cubin before the arch-specific one
        ((10, 0), ("sm_90", "ptx")),  # a newer major: only PTX runs
        ((12, 0), ("sm_90", "ptx")),
        ((7, 5), None),  # older than everything stored: compile from source
    ],
)
def test_binary_choice_by_compute_capability(cc, want):
    got = blob.select(_bins(), "k1", cc)
    assert (got.arch, got.kind) == want if want else got is None


def test_an_arch_specific_cubin_runs_only_on_its_own_device():
    only_a = [blob.Binary("k", "sm_90a", "cubin", b"a")]
    assert blob.select(only_a, "k", (9, 0)).arch == "sm_90a"
    assert blob.select(only_a, "k", (10, 0)) is None
    assert blob.select(_bins(), "other", (9, 0)) is None


# ---- compile half -------------------------------------------------------------------------------


def test_cuda_is_a_builtin_backend():
    entry = next(e for e in registry.backends() if e.name == "cuda")
    assert entry.source == "built-in"
    compiler = registry.get("cuda").compiler()
    assert compiler.name == "cuda" and set(compiler.spec_keys) == {
        "device",
        "arch",
        "precision",
        "fp16_check",
        "mixed",
        "graph",
        "max_shapes",
        "shapes",
        "implicit_conv",
    }


def test_without_arch_the_blob_carries_the_plan_alone():
    lowered = offload.to_backend(_mlp(), "cuda", passes="none")
    plan, binaries = blob.unpack(_delegate(lowered).attributes["processed"])
    assert binaries == [] and [s["type"] for s in plan["ops"]] == ["MatMul", "Relu", "Transpose"]


@needs_nvrtc
def test_arch_stores_a_cubin_per_arch_and_ptx_for_the_newest():
    lowered = offload.to_backend(
        _mlp(), "cuda", compile_specs={"cuda": {"arch": "sm_90, sm_80"}}, passes="none"
    )
    d = _delegate(lowered)
    plan, binaries = blob.unpack(d.attributes["processed"])
    constants = d.attributes["fallback"].constants
    host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
    recorded = record(plan, host, blas=True)
    assert recorded.gemms and all("gemm" not in r.kernel for r in recorded.launches)  # cuBLAS does GEMMs
    keys = {kernel_key(p.source, p.options) for p in recorded.programs}
    assert len(keys) == 2  # the fused Relu, and Transpose
    got = {(b.key, b.arch, b.kind) for b in binaries}
    want = {(k, a, "cubin") for k in keys for a in ("sm_80", "sm_90")} | {(k, "sm_90", "ptx") for k in keys}
    assert got == want
    for b in binaries:
        if b.kind == "cubin":
            assert b.data.startswith(b"\x7fELF")
        else:
            assert b".target sm_90" in b.data
    assert blob.select(binaries, next(iter(keys)), (8, 9)).arch == "sm_80"


@needs_nvrtc
def test_arch_of_a_symbolic_plan_compiles_the_kernels_of_the_listed_shapes():
    nodes = [helper.make_node("Transpose", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    p = model(nodes, [("x", ["N", 3])], ["y"])
    alone = offload.to_backend(p, "cuda", compile_specs={"cuda": {"arch": "sm_80"}}, passes="none")
    assert blob.unpack(_delegate(alone).attributes["processed"])[1] == []  # compiled at init instead
    specs = {"arch": "sm_80", "shapes": json.dumps([{"x": [2, 3]}, {"x": [5, 3]}])}
    lowered = offload.to_backend(p, "cuda", compile_specs={"cuda": specs}, passes="none")
    plan, binaries = blob.unpack(_delegate(lowered).attributes["processed"])
    recorded = record(plan, {}, blas=True, inputs={plan["inputs"][0]: (2, 3)})
    keys = {kernel_key(q.source, q.options) for q in recorded.programs}
    assert len(keys) == 2 and {b.key for b in binaries} == keys  # Transpose and the fused Relu


@needs_nvrtc
def test_arch_with_fp16_stores_the_half_storage_kernels():
    specs = {"cuda": {"arch": "sm_80", "precision": "fp16", "mixed": "0"}}
    d = _delegate(offload.to_backend(_mlp(), "cuda", compile_specs=specs, passes="none"))
    plan, binaries = blob.unpack(d.attributes["processed"])
    assert plan["precision"] == "fp16"
    constants = d.attributes["fallback"].constants
    host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
    recorded = record(plan, host, blas=True)
    assert all("-DOFFLOAD_FP16" in p.options.split() for p in recorded.programs)
    keys = {kernel_key(p.source, p.options) for p in recorded.programs}
    assert {b.key for b in binaries} == keys
    # the fp32 plan's kernels are other builds (other keys)
    fp32 = blob.unpack(_delegate(offload.to_backend(_mlp(), "cuda", passes="none")).attributes["processed"])[
        0
    ]
    assert keys.isdisjoint(kernel_key(p.source, p.options) for p in record(fp32, host, blas=True).programs)


@pytest.mark.parametrize(
    "specs,match",
    [
        ({"arch": "sm_8x"}, "architectures like"),
        ({"arch": "compute_80"}, "architectures like"),
        ({"arch": " , "}, "architectures like"),
        ({"device": "-1"}, ">= 0"),
        ({"device": "gpu0"}, "must be an integer"),
        ({"precision": "fp8"}, r"precision='fp8', takes one of \['fp32', 'fp16'\]"),
        ({"tuning": "quick"}, "no compile spec 'tuning'"),
    ],
)
def test_spec_errors(specs, match):
    with pytest.raises(CompileSpecError, match=match):
        offload.to_backend(_mlp(), "cuda", compile_specs={"cuda": specs}, passes="none")


@needs_nvrtc
def test_an_arch_nvrtc_cannot_target_is_refused():
    with pytest.raises(CompileSpecError, match="cannot compile for sm_10"):
        offload.to_backend(
            _mlp(), "cuda", compile_specs={"cuda": [CompileSpec.of("arch", "sm_10")]}, passes="none"
        )


def test_a_symbolic_dim_is_delegated_and_a_data_dependent_shape_is_not():
    p = model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", 4])], ["y"])
    (op,) = offload.to_backend(p, "cuda", passes="none").main.body.operations
    assert op.op_type == "Delegate"
    nodes = [  # the shape is read from the maxima of a tensor: data, not shapes
        helper.make_node("ReduceMax", ["data", "one"], ["m"], keepdims=0),
        helper.make_node("Slice", ["m", "zero", "two"], ["s"]),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    ints = [("one", np.array([1])), ("zero", np.array([0])), ("two", np.array([2]))]
    p = model(nodes, [("data", [16, 8], np.int64), ("x", [4, 4])], ["y"], ints)
    reshape = p.main.body.operations[-1]
    support = registry.get("cuda").compiler().supports(reshape)
    assert not support and "data-dependent" in support.reason and "ReduceMax" in support.reason


# ---- .pte through the runtime: the device when there is one, else the CPU fallback ---------------

CASES = [
    "test_relu",
    "test_matmul_3d",
    "test_transpose_all_permutations_3",
    "test_softmax_axis_1",
    "test_conv_with_strides_padding",
    "test_maxpool_2d_pads",
    "test_gemm_all_attributes",
    "test_concat_3d_axis_negative_1",
]


@pytest.mark.parametrize("name", CASES)
def test_conformance_case_through_a_cuda_pte(name, tmp_path):
    from tests.conformance.cases import assert_similar, node_cases

    (case,) = [c for c in node_cases() if c.name == name]
    program = offload.load(case.model)
    specs = {"cuda": {"arch": "sm_80,sm_90"}} if nvrtc.available() else None
    lowered = offload.to_backend(program, "cuda", compile_specs=specs, passes="none")
    assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "cannot run here": asserted below
        module = runtime.load(str(path))
    (method,) = module.method_names
    (d,) = module.method(method).delegates
    assert d.backend == "cuda"
    for inputs, expected in case.data_sets:
        got = module.run(inputs)
        if AVAILABLE:
            assert d.runs_on == "backend", d.reason
            for ref, out in zip(expected, got.values()):
                assert_similar(ref, out, case.rtol, case.atol, name)
        else:
            assert d.runs_on == "cpu fallback" and d.reason
            want = offload.evaluate(program, inputs)
            for a, b in zip(got.values(), want.values()):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_unavailable_says_why():
    if AVAILABLE:
        pytest.skip("a CUDA device is here")
    assert not AVAILABLE.ok and AVAILABLE.reason
    assert RT.devices() == []


# ---- on a GPU (pytest -m cuda) -------------------------------------------------------------------


def _run_on_cuda(program, feeds, tmp_path, specs=None):
    lowered = offload.to_backend(program, "cuda", compile_specs=specs, passes="none")
    path = tmp_path / "m.pte"
    offload.save(lowered, path)
    module = runtime.load(str(path))
    (name,) = module.method_names
    delegates = module.method(name).delegates
    assert delegates and all(d.backend == "cuda" and d.runs_on == "backend" for d in delegates), delegates
    return lowered, module.run(feeds)


# The opencl tests' calls (about 1,850) in this many tests, so that ``pytest -n`` spreads them.
CHUNKS = 16


class _OpenCLOnly(Exception):
    """A test that reads the OpenCL runtime's own plan and handle: nothing to run on cuda."""


def cuda_helpers(mod, calls: list, specs=None, graph_checks: bool = False) -> dict:
    """The model helpers of the opencl test module ``mod`` with cuda in place of opencl, each
    program run appended to ``calls``: every delegate must run on the CUDA device; the shared
    ``check`` holds the outputs to onnxruntime's at no less than 1e-5 (the GPU's exp, tanh … and
    contracted multiply-adds differ from PoCL's in the last bits); test_opencl_fp16's
    ``run_fp16`` lowers with its own precision specs (``SPECS``), so its fp16 tests run as fp16.
    ``graph_checks``: each program is run three times — its inputs, other inputs, its inputs
    again — and the third run (a replay of the CUDA graph captured on the first) must equal the
    first bit for bit."""
    specs = (specs or {}).get("cuda", {})
    if hasattr(mod, "SPECS"):
        specs = {**mod.SPECS["opencl"], **specs}

    def run_on_cuda(program, feeds, tmp_path=None, partitions=None, passes="none"):
        calls.append(program)
        lowered = offload.to_backend(program, "cuda", compile_specs={"cuda": specs}, passes=passes)
        module = runtime.load(offload.save(lowered))
        (name,) = module.method_names
        delegates = module.method(name).delegates
        assert delegates and all(d.backend == "cuda" and d.runs_on == "backend" for d in delegates), delegates
        if partitions is not None:
            assert len(delegates) == partitions, delegates
        got = module.run(feeds)
        if graph_checks:
            module.run(
                {n: np.asarray(v * 0.5 if v.dtype.kind == "f" else v, v.dtype) for n, v in feeds.items()}
            )
            again = module.run(feeds)
            for k, v in got.items():
                assert np.array_equal(again[k], v, equal_nan=v.dtype.kind in "fc"), f"replay of {k}"
        return lowered, got

    def check(program, feeds, tmp_path=None, rtol=1e-5, atol=1e-6, whole=False):
        want = reference(program, feeds)
        lowered, got = run_on_cuda(program, feeds, partitions=1 if whole else None)
        if whole:
            assert [op.op_type for op in lowered.main.body.operations] == ["Delegate"]
        for k, v in want.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, got[k].shape)
            np.testing.assert_allclose(got[k], v, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5))
        return got

    def opencl_only(*args, **kwargs):
        raise _OpenCLOnly

    helpers = {"run_on_opencl": run_on_cuda, "plan_and_handle": opencl_only, "handle": opencl_only}
    if hasattr(mod, "run_fp16"):  # its own check calls run_fp16
        helpers["run_fp16"] = lambda program, feeds, tmp_path: run_on_cuda(program, feeds, partitions=1)
    else:
        helpers["check"] = check
    return helpers


def run_opencl_tests(chunk: int, specs=None, graph_checks: bool = False) -> tuple[int, list[str]]:
    """The opencl tests' calls of one chunk through ``cuda_helpers``: how many ran a model
    through them, and the failures of those. A test that ran none (it reads the OpenCL plan or
    device itself, or is skipped) is not counted."""
    from .test_cuda_nvrtc import call_with_helpers, opencl_test_calls

    ran, failures, calls = 0, [], []
    for name, mod, fn, kwargs in opencl_test_calls()[chunk::CHUNKS]:
        before = len(calls)
        try:
            call_with_helpers(mod, fn, kwargs, cuda_helpers(mod, calls, specs, graph_checks))
        except (_OpenCLOnly, pytest.skip.Exception):
            continue
        except (Exception, pytest.fail.Exception) as e:
            if len(calls) > before:
                failures.append(f"{name}: {type(e).__name__}: {str(e)[:400]}")
        ran += len(calls) > before
    return ran, failures


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("specs", [None, {"cuda": {"arch": "sm_80,sm_90", "graph": "0"}}])
@pytest.mark.cuda
@pytest.mark.skipif(not AVAILABLE, reason="no CUDA device")
def test_opencl_tests_on_cuda(specs, chunk):
    """The opencl tests, each through cuda on the device (JIT with CUDA graphs, the default; and
    stored cubins / PTX launched kernel by kernel), with their own references and assertions."""
    if specs and not nvrtc.available():
        pytest.skip(nvrtc.IMPORT_ERROR)
    ran, failures = run_opencl_tests(chunk, specs)
    assert ran > 0
    assert not failures, f"{len(failures)} of {ran} opencl tests fail on cuda:\n" + "\n".join(failures[:30])


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.cuda
@pytest.mark.skipif(not AVAILABLE, reason="no CUDA device")
def test_opencl_tests_replayed_as_cuda_graphs(chunk, monkeypatch):
    """graph=1: the opencl tests through cuda with each specialization captured as a CUDA graph on
    its first run and replayed after (a replay must read the inputs copied in before it); a
    specialization that capture refuses must still give the right values. Prints what capture
    refused and why."""
    from offload.delegates.cuda import runtime as cuda_runtime

    refusals = []

    class _Warnings:
        @staticmethod
        def warn(message, *args, **kwargs):
            refusals.append(str(message))

    monkeypatch.setattr(cuda_runtime, "warnings", _Warnings)
    before = dict(cuda_runtime.GRAPH_STATS)
    ran, failures = run_opencl_tests(chunk, {"cuda": {"graph": "1"}}, graph_checks=True)
    stats = {k: cuda_runtime.GRAPH_STATS[k] - before[k] for k in before}
    print(stats, *sorted(set(refusals)), sep="\n")
    assert not failures, f"{len(failures)} of {ran} opencl tests fail as cuda graphs:\n" + "\n".join(
        failures[:30]
    )
    assert stats["captured"] > 0 and stats["replayed"] > stats["captured"]


@pytest.mark.parametrize(
    "attrs,bias_shape",
    [({}, None), ({"transA": 1}, (5,)), ({"transB": 1, "alpha": 0.5}, (3, 1)), ({"beta": 2.0}, (3, 5))],
)
@pytest.mark.cuda
@pytest.mark.skipif(not AVAILABLE, reason="no CUDA device")
def test_gemm_through_cublas(attrs, bias_shape, tmp_path):
    a_shape = (4, 3) if attrs.get("transA") else (3, 4)
    b_shape = (5, 4) if attrs.get("transB") else (4, 5)
    init = [("b", RNG.standard_normal(b_shape).astype(np.float32))]
    inputs = ["a", "b"]
    if bias_shape:
        init.append(("c", RNG.standard_normal(bias_shape).astype(np.float32)))
        inputs.append("c")
    p = model([helper.make_node("Gemm", inputs, ["y"], **attrs)], [("a", list(a_shape))], ["y"], init)
    feeds = {"a": RNG.standard_normal(a_shape).astype(np.float32)}
    _, got = _run_on_cuda(p, feeds, tmp_path)
    np.testing.assert_allclose(got["y"], reference(p, feeds)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not AVAILABLE, reason="no CUDA device")
def test_stored_cubins_load_and_a_warm_init_compiles_nothing():
    from offload.delegates.cuda import device

    cc = device.device_for(0).cc
    arch = f"sm_{cc[0]}{cc[1]}"
    program = _mlp()
    lowered = offload.to_backend(program, "cuda", compile_specs={"cuda": {"arch": arch}}, passes="none")
    d = _delegate(lowered)
    weights = {n: v.const_value for n, v in d.attributes["fallback"].constants.items()}
    device._MODULES.clear()
    before = dict(device.BUILD_STATS)
    h1 = RT.init(d.attributes["processed"], [], weights)
    assert device.BUILD_STATS["loaded"] - before["loaded"] == 2
    assert device.BUILD_STATS["built"] == before["built"]
    h2 = RT.init(d.attributes["processed"], [], weights)
    assert device.BUILD_STATS["memory_hits"] - before["memory_hits"] == 2
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    want = offload.evaluate(program, {"x": x})["y"]
    for h in (h1, h2):
        np.testing.assert_allclose(RT.execute(h, [x])[0], want, rtol=1e-5, atol=1e-5)
        RT.destroy(h)


# ---- the runtime's builder, with numpy standing in for the device --------------------------------


class _HostAllocator:
    """Device buffers as numpy bytes: what ``device.Allocator`` does with CuPy arrays."""

    def alloc(self, nbytes):
        return np.zeros(max(int(nbytes), 4), np.uint8)

    @staticmethod
    def view(buffer, shape, dtype, offset=0, strides=None):
        itemsize = np.dtype(dtype).itemsize
        flat = buffer[int(offset) * itemsize :].view(dtype)
        if strides is None:
            return flat[: int(np.prod(shape))].reshape(shape)
        return np.lib.stride_tricks.as_strided(flat, shape, tuple(int(s) * itemsize for s in strides))


class _HostDevice:
    allocator = _HostAllocator()


def _host_builder(program, monkeypatch, specs=None):
    """The CUDA runtime's builder over a lowered program's plan, no kernels built, no device."""
    from offload.delegates.cuda import runtime as cuda_runtime

    monkeypatch.setattr(cuda_runtime, "build", lambda device, source, options, binaries: _Module())
    d = _delegate(offload.to_backend(program, "cuda", compile_specs=specs, passes="none"))
    plan, _ = blob.unpack(d.attributes["processed"])
    constants = d.attributes["fallback"].constants
    host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
    b = cuda_runtime.CUDABuilder(_HostDevice(), plan, host, [])
    b.record(plan)
    return plan, host, b


def _run_gemms_on_numpy(plan, host, b, x, monkeypatch, storage=None):
    """Place the builder's buffers in host memory, fill weights and the one input ``x``, and run
    its recorded cuBLAS GEMMs with numpy standing in for CuPy; the output as stored."""
    from offload.delegates.cuda import runtime as cuda_runtime

    buffers = b.place({*plan["inputs"], *plan["outputs"], *host})
    for i, value in [*host.items(), (plan["inputs"][0], x)]:
        _HostAllocator.view(buffers[i], value.shape, storage or value.dtype)[...] = value
    monkeypatch.setattr(cuda_runtime, "cp", np)
    for g in b.launches:
        g.bind(buffers, _HostAllocator.view)
        g.run(None)
    (out,) = plan["outputs"]
    return buffers[out], _HostAllocator.view(buffers[out], b.shapes[out], storage or np.float32)


class _Module:
    def get_function(self, name):
        return name


@pytest.mark.parametrize(
    "attrs,a_shape,b_shape,bias_shape",
    [
        ({}, (3, 4), (4, 5), None),
        ({"transA": 1}, (4, 3), (4, 5), (5,)),
        ({"transB": 1, "alpha": 0.5}, (3, 4), (5, 4), (3, 1)),
        ({"transA": 1, "transB": 1, "beta": 2.0}, (4, 3), (5, 4), (3, 5)),
        ({"beta": 0.0}, (3, 4), (4, 5), (1, 5)),
    ],
)
def test_cublas_gemm_views_compute_the_gemm(attrs, a_shape, b_shape, bias_shape, monkeypatch):
    """Gemm's strided views and cupy.matmul calls, run by numpy (same API): ONNX's Gemm."""
    from offload.delegates.cuda import runtime as cuda_runtime

    init = [("b", RNG.standard_normal(b_shape).astype(np.float32))]
    if bias_shape:
        init.append(("c", RNG.standard_normal(bias_shape).astype(np.float32)))
    names = ["a", "b"] + (["c"] if bias_shape else [])
    p = model([helper.make_node("Gemm", names, ["y"], **attrs)], [("a", list(a_shape))], ["y"], init)
    feeds = {"a": RNG.standard_normal(a_shape).astype(np.float32)}
    plan, host, b = _host_builder(p, monkeypatch)
    assert b.launches and all(isinstance(x, cuda_runtime.Gemm) for x in b.launches)
    _, got = _run_gemms_on_numpy(plan, host, b, feeds["a"], monkeypatch)
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "attrs,a_shape,b_shape,bias_shape",
    [
        ({}, (3, 4), (4, 5), None),
        ({"transA": 1, "alpha": 0.5}, (4, 3), (4, 5), (5,)),
        ({"transA": 1, "transB": 1, "beta": 2.0}, (4, 3), (5, 4), (3, 1)),
    ],
)
def test_cublas_gemm_views_of_half_storage(attrs, a_shape, b_shape, bias_shape, monkeypatch):
    """precision=fp16: the GEMM views are float16 (two bytes a value, the same element strides)
    and the result is stored as half; numpy stands in for CuPy on those views."""
    from offload.delegates.cuda import runtime as cuda_runtime

    h = lambda s: RNG.standard_normal(s).astype(np.float16).astype(np.float32)  # noqa: E731
    init = [("b", h(b_shape))] + ([("c", h(bias_shape))] if bias_shape else [])
    names = ["a", "b"] + (["c"] if bias_shape else [])
    p = model([helper.make_node("Gemm", names, ["y"], **attrs)], [("a", list(a_shape))], ["y"], init)
    feeds = {"a": h(a_shape)}
    plan, host, b = _host_builder(p, monkeypatch, {"cuda": {"precision": "fp16", "mixed": "0"}})
    assert plan["precision"] == "fp16"
    assert all(isinstance(x, cuda_runtime.Gemm) and x.storage == "float16" for x in b.launches)
    out_buffer, stored = _run_gemms_on_numpy(plan, host, b, feeds["a"], monkeypatch, np.float16)
    assert out_buffer.nbytes == 2 * int(np.prod(stored.shape))
    got = stored.astype(np.float32)
    # exact operands, K = 4: the product and the epilogue rounded to half (and numpy's float16
    # matmul may round its partial sums too): a few units of 2^-11 on O(1) values
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=4e-3, atol=4e-3)


def test_a_grouped_1x1_conv_with_relu_is_one_batched_cublas_call(monkeypatch):
    """The groups as one strided batched GEMM (3-D views), its bias and the fused Relu after it:
    ONNX's Conv then Relu."""
    w, bias = RNG.standard_normal((6, 3, 1, 1)), RNG.standard_normal(6)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=3),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    p = model(nodes, [("x", [2, 9, 3, 5])], ["y"], [("w", w), ("b", bias)])
    feeds = {"x": RNG.standard_normal((2, 9, 3, 5)).astype(np.float32)}
    plan, host, b = _host_builder(p, monkeypatch)
    assert [s["type"] for s in plan["ops"]] == ["Conv"] and plan["ops"][0]["epilogue"] == ["Relu"]
    assert [(g.call.batch, g.call.relu) for g in b.launches] == [(3, True)] * 2  # one call per image
    _, got = _run_gemms_on_numpy(plan, host, b, feeds["x"], monkeypatch)
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_batched_matmul_views_compute_the_matmul(monkeypatch):

    w = RNG.standard_normal((3, 1, 4, 5)).astype(np.float32)
    p = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 3, 4])], ["y"], [("w", w)])
    feeds = {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)}
    plan, host, b = _host_builder(p, monkeypatch)
    assert len(b.launches) == 3 * 2  # one GEMM per broadcast batch
    _, got = _run_gemms_on_numpy(plan, host, b, feeds["x"], monkeypatch)
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=1e-5, atol=1e-5)


def test_intermediates_share_buffers_only_when_their_lifetimes_do_not_overlap(monkeypatch):
    nodes = [
        helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
        helper.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0]),
        helper.make_node("Reshape", ["t3", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0]),
    ]
    p = model(nodes, [("x", [4, 6])], ["y"], [("shape", np.array([6, 4], np.int64))])
    plan, host, b = _host_builder(p, monkeypatch)
    assert len(b.launches) == 4  # the Reshape launches nothing
    assert all(x.grid == (1, 1, 1) and x.block == (DEFAULT_BLOCK, 1, 1) for x in b.launches)
    pinned = {b.root(v) for v in (*plan["inputs"], *plan["outputs"], *host)}
    buffers = b.place(pinned)
    t1, t2, t3, r = (step["outputs"][0] for step in plan["ops"][:4])
    assert b.root(r) == t3 and buffers[r] is buffers[t3]  # an alias shares its source's buffer
    assert buffers[t1] is not buffers[t2] and buffers[t2] is not buffers[t3]  # read while written
    assert buffers[t1] is buffers[t3]  # t1 is dead once t2 is written
    assert all(buffers[v] is not buffers[u] for v in pinned for u in (t1, t2, t3))


def test_mixed_precision_keeps_the_same_values_float32_as_opencl():
    # one plan builder decides for both backends: same kept values, same float32 steps
    p = overflowing()
    samples = [{"x": np.full((2, 3), 100, np.float32)}]
    plans = {}
    for name in ("cuda", "opencl"):
        low = offload.to_backend(p, name, {name: {"precision": "fp16"}}, passes="none", calibration=samples)
        processed = _delegate(low).attributes["processed"]
        plans[name] = blob.unpack(processed)[0] if name == "cuda" else json.loads(bytes(processed))
    assert plans["cuda"]["fp32"] == plans["opencl"]["fp32"] and plans["cuda"]["fp32"]
    assert [s.get("fp32") for s in plans["cuda"]["ops"]] == [s.get("fp32") for s in plans["opencl"]["ops"]]


# ---- CUDA graphs (compile spec graph=1) ---------------------------------------------------------
# Not run on a device yet: these check the capture-then-replay control flow with a stream and
# launches standing in for CuPy's.


class _Stream:
    def __init__(self, fail_on: int | None = None):
        self.capturing, self.captured, self.graph_launches, self.fail_on = False, [], 0, fail_on

    def begin_capture(self):
        self.capturing = True

    def end_capture(self):
        self.capturing = False
        stream = self

        class _Graph:
            def launch(self, s):
                assert s is stream
                stream.graph_launches += 1

        return _Graph()


class _Launch:
    def __init__(self, k: int):
        self.k, self.runs = k, 0

    def run(self, stream):
        if stream.capturing:
            if stream.fail_on == self.k:
                raise RuntimeError("operation not permitted when stream is capturing")
            stream.captured.append(self.k)
        else:
            self.runs += 1


def _spec(launches):
    from offload.delegates.cuda.runtime import CUDASpecialized

    return CUDASpecialized([], [], {}, launches)


def test_a_graph_is_captured_once_and_replayed():
    from offload.delegates.cuda.runtime import GRAPH_STATS, replay

    launches, stream = [_Launch(0), _Launch(1)], _Stream()
    spec = _spec(launches)
    before = dict(GRAPH_STATS)
    for _ in range(3):
        replay(spec, stream)
    assert stream.captured == [0, 1] and stream.graph_launches == 3
    assert {k: GRAPH_STATS[k] - before[k] for k in before} == {"captured": 1, "refused": 0, "replayed": 3}
    assert [launch.runs for launch in launches] == [0, 0]  # captured, never run one by one


def test_cublas_calls_run_between_the_graphs_of_the_launches_around_them():
    # CuPy refuses cuBLAS calls while a stream captures: kernels 0, 1 | GEMM | kernel 2 are two
    # graphs with the GEMM made between their launches, in order, on every run
    from offload.delegates.cuda.runtime import Gemm, replay

    order = []

    class _Gemm(Gemm):
        def __init__(self):
            self.runs = 0

        def run(self, stream):
            assert not stream.capturing
            order.append("gemm")

    class _Graph:
        def __init__(self, captured):
            self.captured = captured

        def launch(self, s):
            order.append(tuple(self.captured))

    stream = _Stream()
    stream.end_capture = lambda: (setattr(stream, "capturing", False), _Graph(stream.captured[:]))[1]
    stream.begin_capture = lambda: (setattr(stream, "capturing", True), stream.captured.clear())
    launches = [_Launch(0), _Launch(1), _Gemm(), _Launch(2)]
    spec = _spec(launches)
    for _ in range(2):
        replay(spec, stream)
    assert order == [(0, 1), "gemm", (2,)] * 2
    assert [launch.runs for launch in launches if isinstance(launch, _Launch)] == [0, 0, 0]


def test_a_specialization_that_cannot_be_captured_runs_launch_by_launch_and_warns_once():
    from offload.delegates.cuda.runtime import replay

    launches, stream = [_Launch(0), _Launch(1)], _Stream(fail_on=1)
    spec = _spec(launches)
    with pytest.warns(RuntimeWarning, match="could not be captured as a CUDA graph"):
        replay(spec, stream)
    assert spec.graph is False and [launch.runs for launch in launches] == [1, 1]
    assert not stream.capturing  # the capture was ended


def test_graph_takes_0_or_1():
    with pytest.raises(CompileSpecError, match="graph='yes'"):
        offload.to_backend(_mlp(), "cuda", {"cuda": {"graph": "yes"}}, passes="none")


@pytest.mark.cuda
@pytest.mark.skipif(not AVAILABLE, reason="no CUDA device")
def test_an_output_read_only_by_the_next_cuda_delegate_stays_on_the_device():
    # tanh(x) goes from the first cuda delegate to the second as a CUDATensor; relu(tanh(x)) goes
    # through the CPU's Sigmoid (denied); results against onnxruntime
    from offload.partitioner import Partitioner
    from offload.profile import Profile

    nodes = [
        helper.make_node("Tanh", ["x"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["u", "s"], ["y"]),
    ]
    p = model(nodes, [("x", [64, 64])], ["y"])
    low = offload.to_backend(p, Partitioner("cuda", deny_ops=["Sigmoid"]), passes="none")
    module = runtime.load(offload.save(low))
    assert module.method("forward").kept_on_device == 1
    feeds = {"x": RNG.standard_normal((64, 64)).astype(np.float32)}
    profile = Profile()
    got = module.run(feeds, profile=profile)["y"]
    np.testing.assert_allclose(got, reference(p, feeds)["y"], rtol=1e-5, atol=1e-5)
