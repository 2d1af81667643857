"""Every kernel the `cuda` backend can be asked to build compiles with NVRTC, here, without a GPU.

Kernels are found the way the runtime finds them: the shared launchers run on a device-free
``RecordingBuilder`` over the plans that ``to_backend(..., "cuda")`` writes for the ONNX
conformance node cases and for the models of the opencl tests in this folder (whatever kernels
and tests exist when this runs). Each distinct (source, options) compiles once per target:
PTX for compute_80 and a cubin for sm_90 (ptxas too). A compile error fails with NVRTC's log.
"""

from __future__ import annotations

import glob
import importlib
import inspect
import itertools
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np
import pytest
from onnx import helper

import offload
from offload.delegates.cuda import blob, nvrtc
from offload.delegates.cuda.record import Program, record
from offload.delegates.gpu.api import common, source
from offload.delegates.gpu.ops import linalg

from .opencl_support import model

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason=nvrtc.IMPORT_ERROR)
HERE = os.path.dirname(__file__)
KERNELS = os.path.join(HERE, "..", "..", "kernels_cl")
# Every kernel compiles to an sm_90 binary: NVRTC's front end and optimizer, then ptxas (which
# catches what PTX alone does not, such as a kernel's shared memory past the limit). The sources
# have no architecture-dependent code, so a second target repeats the front end on every kernel;
# each kernel file with its default options also compiles to sm_80 PTX (``SECOND_TARGET``).
TARGETS = (("sm_90", "cubin"),)
SECOND_TARGET = (("sm_80", "ptx"),)


def delegate_programs(program, specs=None) -> tuple[set[Program], list[str]]:
    """The kernels every cuda delegate of ``program`` builds (GEMMs as cuBLAS calls, and as
    matmul.cl for the builders without BLAS, those made for GPUs and for CPU devices), and the reasons of delegates whose launchers
    refused their plan (another op family's business: its own tests say so)."""
    lowered = offload.to_backend(program, "cuda", compile_specs=specs, passes="none")
    found, refused = set(), []
    for op in lowered.main.body.operations:
        if op.op_type != "Delegate":
            continue
        plan, _ = blob.unpack(op.attributes["processed"])
        constants = op.attributes["fallback"].constants
        host = {int(i): constants[n].const_value for i, n in plan["weights"].items()}
        try:
            for blas, kind in ((True, "gpu"), (False, "gpu"), (False, "cpu")):
                found |= set(record(plan, host, blas=blas, device_kind=kind).programs)
        except offload.errors.OffloadError as e:
            refused.append(str(e))
    return found, refused


@lru_cache(maxsize=1)
def conformance_programs() -> tuple[dict[Program, str], list[str]]:
    """Distinct kernels of the conformance node cases lowered to cuda → a case that asks for it."""
    from tests.conformance.cases import node_cases

    found: dict[Program, str] = {}
    refused = []
    for case in node_cases():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                programs, why = delegate_programs(offload.load(case.model))
        except offload.errors.OffloadError:
            continue  # a model offload does not load: not a kernel question
        refused += [f"{case.name}: {w}" for w in why]
        for p in programs:
            found.setdefault(p, case.name)
    return found, refused


class _Captured(Exception):
    pass


def _param_sets(fn) -> list[dict]:
    """The keyword sets of a test function's parametrize marks (their cartesian product)."""
    axes = []
    for mark in reversed(getattr(fn, "pytestmark", [])):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        rows = []
        for v in values:
            if hasattr(v, "marks") and hasattr(v, "values"):  # pytest.param(...)
                v = v.values if len(names) > 1 else v.values[0]
            rows.append(dict(zip(names, v)) if len(names) > 1 else {names[0]: v})
        axes.append(rows)
    return [
        dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*axes)
    ]


HELPERS = ("check", "run_on_opencl", "plan_and_handle")


def opencl_test_calls() -> list[tuple]:
    """(test id, module, test function, keyword arguments) of every call of an opencl test
    function here with its parametrize values (``tmp_path`` a fresh folder) whose module uses one
    of the model helpers ``HELPERS``; tests that need other fixtures are left out."""
    import tempfile
    from pathlib import Path

    calls = []
    tmp = Path(tempfile.mkdtemp(prefix="offload-cuda-models-"))
    for path in sorted(glob.glob(os.path.join(HERE, "test_opencl*.py"))):
        mod = importlib.import_module(f"tests.delegates.{os.path.basename(path)[:-3]}")
        if not any(n in mod.__dict__ for n in HELPERS):
            continue
        for attr, fn in sorted(vars(mod).items()):
            if not attr.startswith("test_") or not inspect.isfunction(fn):
                continue
            params = set(inspect.signature(fn).parameters)
            for kwargs in _param_sets(fn) or [{}]:
                if not params <= set(kwargs) | {"tmp_path"}:
                    continue  # other fixtures: not a model test
                if "tmp_path" in params:
                    kwargs = {**kwargs, "tmp_path": tmp}
                name = f"{mod.__name__.rsplit('.', 1)[1]}::{attr}[{'-'.join(map(str, kwargs.values()))}]"
                calls.append((name, mod, fn, kwargs))
    return calls


def call_with_helpers(mod, fn, kwargs, helpers: dict) -> None:
    """``fn(**kwargs)`` with the model helpers of ``mod`` replaced by ``helpers`` (restored after)."""
    saved = {n: mod.__dict__[n] for n in helpers if n in mod.__dict__}
    try:
        for n in saved:
            setattr(mod, n, helpers[n])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            fn(**kwargs)
    finally:
        for n, v in saved.items():
            setattr(mod, n, v)


@lru_cache(maxsize=1)
def opencl_test_models() -> tuple:
    """(test id, program, feeds, rtol, atol) of every model the opencl tests here hand to
    ``check`` / ``run_on_opencl`` / ``plan_and_handle``: each test function is called with its
    parameters and those helpers replaced by one that records the model and stops the test."""
    captured = []

    def capture(name):
        def stub(program, feeds=None, tmp_path=None, rtol=1e-5, atol=1e-6, *args, **kwargs):
            captured.append((name, program, feeds, rtol, atol))
            raise _Captured

        return stub

    for name, mod, fn, kwargs in opencl_test_calls():
        try:
            call_with_helpers(mod, fn, kwargs, dict.fromkeys(HELPERS, capture(name)))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # _Captured, pytest.skip, or a test needing what the stub did not give
            pass
    return tuple(captured)


# Each opencl test model is also planned with float32 values stored as half: the fp16 variant of
# every kernel (-DOFFLOAD_FP16, half loads and stores through the prelude) must compile too; and
# with mixed precision, whose plans (unbounded inputs: only values after a bounding op, such as a
# Softmax, are half) hold the storage conversions of convert.cl.
PRECISIONS = {
    "": None,
    " fp16": {"cuda": {"precision": "fp16", "mixed": "0"}},
    " mixed": {"cuda": {"precision": "fp16"}},
}


@lru_cache(maxsize=1)
def opencl_model_programs() -> tuple[dict[Program, str], list[str]]:
    found: dict[Program, str] = {}
    refused = []
    for name, program, *_ in opencl_test_models():
        for suffix, specs in PRECISIONS.items():
            try:
                programs, why = delegate_programs(program, specs)
            except offload.errors.OffloadError:
                continue
            refused += [f"{name}{suffix}: {w}" for w in why]
            for p in programs:
                found.setdefault(p, name + suffix)
    return found, refused


_COMPILED: dict[tuple[Program, str, str], float] = {}  # each distinct kernel compiles once per target


def compile_all(programs: dict[Program, str], targets=TARGETS) -> list[str]:
    """NVRTC on every program for every target; the failures, each with its log. NVRTC releases
    the GIL while it compiles, so the compiles run on a thread per core."""
    todo = [
        (p, where, arch, kind)
        for p, where in programs.items()
        for arch, kind in targets
        if (p, arch, kind) not in _COMPILED
    ]

    def one(item):
        p, where, arch, kind = item
        start = time.perf_counter()
        try:
            nvrtc.compile(p.source, p.options, arch, kind, name=where)
        except offload.errors.KernelError as e:
            return f"--- {where} (options {p.options!r}):\n{e}"
        _COMPILED[(p, arch, kind)] = time.perf_counter() - start
        return None

    with ThreadPoolExecutor(max(1, min(len(todo), os.cpu_count() or 1))) as pool:
        return [f for f in pool.map(one, todo) if f is not None]


def _cl_files() -> list[str]:
    return sorted(os.path.basename(f) for f in glob.glob(os.path.join(KERNELS, "*.cl")))


@pytest.mark.parametrize("file", _cl_files())
def test_every_kernel_file_compiles_with_the_options_launchers_use(file):
    text = source(file)
    seen = {p.options for p in [*conformance_programs()[0], *opencl_model_programs()[0]] if p.source == text}
    # A file no plan asks for yet still compiles with its defaults.
    failures = compile_all({Program(text, o): f"{file} {o}".strip() for o in sorted(seen) or [""]})
    failures += compile_all({Program(text, ""): file}, SECOND_TARGET)
    assert not failures, "\n".join(failures)


def test_every_kernel_of_the_conformance_cases_compiles():
    programs, refused = conformance_programs()
    assert len(programs) > 20  # the node cases reach every op family
    failures = compile_all(programs)
    assert not failures, f"{len(failures)} of {len(programs)} kernels fail:\n" + "\n".join(failures[:5])
    print(f"\n{len(programs)} distinct kernels; {len(refused)} delegates refused by their launchers")


def test_every_kernel_of_the_opencl_test_models_compiles():
    models = opencl_test_models()
    assert len(models) > 20
    programs, _ = opencl_model_programs()
    failures = compile_all(programs)
    assert not failures, f"{len(failures)} of {len(programs)} kernels fail:\n" + "\n".join(failures[:5])
    print(
        f"\n{len(models)} models, {len(programs)} distinct kernels, {len(_COMPILED)} NVRTC compiles "
        f"in {sum(_COMPILED.values()):.1f}s"
    )


def test_float_kernels_do_no_double_math():
    """The prelude leaves exp, fmin, isnan ... to CUDA's float overloads: a float kernel's PTX
    has no f64 instruction (the double versions would be slower and round differently)."""
    ops = ["Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Relu"]
    nodes = [helper.make_node(op, [f"t{k}"], [f"t{k + 1}"]) for k, op in enumerate(ops)]
    nodes += [
        helper.make_node("Max", [f"t{len(ops)}", "c"], ["u"]),
        helper.make_node("Clip", ["u", "lo", "hi"], ["y"]),
    ]
    p = model(
        nodes,
        [("t0", [3, 4]), ("c", [4])],
        ["y"],
        [("lo", np.float32(-0.5)), ("hi", np.float32(0.5))],
    )
    programs, refused = delegate_programs(p)
    assert programs and not refused
    for prog in programs:
        ptx = nvrtc.compile(prog.source, prog.options, "sm_80", "ptx").decode()
        assert ".f64" not in ptx, prog.source


def test_fp16_kernels_of_the_opencl_test_models_compile():
    programs, _ = opencl_model_programs()
    half = {p: w for p, w in programs.items() if "-DOFFLOAD_FP16" in p.options.split()}
    # every kernels_cl file and the generated elementwise kernels have a fp16 build among them
    files = {os.path.basename(f) for f in glob.glob(os.path.join(KERNELS, "*.cl"))}
    built = {f for f in files for p in half if p.source == source(f)}
    assert built == files, files - built
    assert any(p.source.count("__kernel void ew(") for p in half)
    failures = compile_all(half)
    assert not failures, f"{len(failures)} of {len(half)} kernels fail:\n" + "\n".join(failures[:5])


def test_prelude_half_conversions_are_the_ieee_instructions():
    # cvt.f32.f16 (exact) to load, cvt.rn.f16.f32 (round to nearest even) to store
    ptx = nvrtc.compile(
        common() + "__kernel void k(__global const stype* x, __global stype* y, const int n) {\n"
        " const int i = get_global_id(0); if (i < n) STOREF(y, i, LOADF(x, i) * 3.0f); }",
        "-DOFFLOAD_FP16",
        "sm_80",
        "ptx",
    ).decode()
    for ins in ("cvt.f32.f16", "cvt.rn.f16.f32"):
        assert ins in ptx, ins
    assert ".f64" not in ptx


def test_every_gemm_variant_compiles_and_sums_with_one_fma_per_product():
    """A CUDA plan asks for the GPU variants of matmul.cl only (``linalg.variant_for`` picks by
    device kind), but the file is one source: every variant's build options compile, float32 and
    half, and the CPU kernel's float8 lanes (the prelude's struct) multiply-add in one fma as the
    scalar kernels do, so the variants agree on CUDA as on OpenCL."""
    text = source("matmul.cl")
    opts = {linalg.variant_option(v) for v in linalg.VARIANTS} | {"-DWPT=1"}  # conv_gemm's 16 x 16
    programs = {
        Program(text, f"{o} {h}".strip()): f"matmul.cl {o} {h}" for o in opts for h in ("", "-DOFFLOAD_FP16")
    }
    failures = compile_all(programs)
    assert not failures, "\n".join(failures)
    ptx = nvrtc.compile(text, "-DRM=6", "sm_80", "ptx").decode()
    packed = ptx[ptx.index(".entry gemm_packed(") :]
    packed = packed.split(".entry ", 2)[1]  # up to the next kernel
    # the k loop's 12 float8 accumulators multiply-add in fmas (unfused: 96 adds a k step); the
    # only float adds are the epilogue's residual adds, one for each of the 16 columns it stores
    assert packed.count("fma.rn.f32") >= 12 and packed.count("add.f32") <= 16 and "add.rn.f32" not in packed


def test_the_implicit_gemm_conv_compiles_for_every_blocking_with_one_fma_per_product():
    """conv_gemm (matmul.cl) compiles for each blocking a plan asks for (16 x 16, 64 x 64 and 128 x
    128 outputs a work-group), and every product of its k loop is a multiply-add in one fma: no
    float multiply stands alone (its store adds the bias with alpha = beta = 1 folded away)."""
    for wpt in (1, 4, 8):
        ptx = nvrtc.compile(source("matmul.cl"), f"-DWPT={wpt}", "sm_80", "ptx").decode()
        kernel = ptx[ptx.index(".entry conv_gemm(") :].split(".entry ", 2)[1]
        assert (
            kernel.count("fma.rn.f32") >= wpt * wpt and "mul.f32" not in kernel and "mul.rn.f32" not in kernel
        )


def test_a_refused_source_fails_with_the_nvrtc_log():
    with pytest.raises(nvrtc.CUDABuildError, match=r"kernel\.cl\(2\).*undefined_name"):
        nvrtc.compile("__kernel void k(__global float* x) {\n x[0] = undefined_name; }", "", "sm_80")


def test_prelude_maps_the_opencl_work_item_functions():
    # get_global_id(0) must index blockIdx.x * blockDim.x + threadIdx.x: the PTX reads all three.
    ptx = nvrtc.compile(
        "__kernel void k(__global int* y, const int n) {\n"
        " __local int s[4]; const int i = get_global_id(0); if (i >= n) return;\n"
        " s[get_local_id(0) % 4] = (int)get_group_id(1); barrier(CLK_LOCAL_MEM_FENCE);\n"
        " y[i] = s[0] + (int)get_local_size(2) + (INFINITY > 0.0f); }",
        "",
        "sm_80",
        "ptx",
    ).decode()
    for reg in ("%ctaid.x", "%ntid.x", "%tid.x", "%ctaid.y", "%ntid.z", "bar.sync", ".shared"):
        assert reg in ptx, reg
    assert ".entry k(" in ptx  # extern "C": the kernel keeps its OpenCL name
