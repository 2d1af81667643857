"""The compile half of the `cuda` backend: the shared GPU plan, plus kernels NVRTC compiled ahead of time.

Without the ``arch`` spec the blob carries the plan alone and the runtime compiles its kernels
at init (NVRTC through CuPy, cached). With ``arch`` ('sm_80,sm_90') every kernel the plan's
launchers ask for is compiled here, device-free, to a cubin per architecture and to PTX for the
newest (which later GPUs' drivers compile): a device that matches needs no compiler at init.
"""

from __future__ import annotations

import json

from offload.ir import Program

from ..backend import CompileSpec, CompileSpecError, PreprocessResult
from ..gpu.compiler import IMPLICIT_CONV_SPEC, PRECISION_SPEC, GPUCompiler
from ..gpu.precision import FP16_CHECK_SPEC, MIXED_SPEC, flag_spec
from ..gpu.specialize import MAX_SHAPES_SPEC, SHAPES_SPEC, planned_shapes
from . import blob, nvrtc
from .record import record
from .source import ARCH, kernel_key

SPEC_KEYS = {
    "device": "CUDA device index (default 0)",
    "arch": "GPU architectures to compile kernels for ahead of time, e.g. 'sm_80,sm_90' (needs NVRTC)",
    "precision": PRECISION_SPEC,
    "fp16_check": FP16_CHECK_SPEC,
    "mixed": MIXED_SPEC,
    "graph": (
        "1 (default) | 0: capture each specialization's kernel launches between cuBLAS calls as CUDA "
        "graphs on its first run and launch those after (CuPy stream capture); 0: launch by launch"
    ),
    "implicit_conv": IMPLICIT_CONV_SPEC,
    "max_shapes": MAX_SHAPES_SPEC,
    "shapes": SHAPES_SPEC,
}


def parse_arch(spec: CompileSpec) -> list[str]:
    """The ``arch`` spec as a sorted list of distinct 'sm_XX' names; CompileSpecError when bad."""
    archs = sorted(
        {a.strip() for a in spec.text().split(",") if a.strip()},
        key=lambda a: (blob.arch_number(a) if ARCH.match(a) else 0, a),
    )
    bad = [a for a in archs if not ARCH.match(a)]
    if not archs or bad:
        raise CompileSpecError(
            f"cuda backend: compile spec 'arch' must list architectures like 'sm_80,sm_90', got {spec.text()!r}"
        )
    return archs


def parse_device(spec: CompileSpec) -> int:
    index = spec.integer()
    if index < 0:
        raise CompileSpecError(f"cuda backend: compile spec 'device' must be >= 0, got {index}")
    return index


def compile_kernels(plan: dict, host: dict, archs: list[str], signatures=((),)) -> list[blob.Binary]:
    """A cubin per architecture, and PTX for the newest, of every kernel the plan's launchers ask
    for at each input signature (GEMMs go to cuBLAS: matmul.cl comes in only for the implicit-GEMM
    Conv, ``conv_gemm``)."""
    if not nvrtc.available():
        raise CompileSpecError(f"cuda backend: compile spec 'arch' needs NVRTC: {nvrtc.IMPORT_ERROR}")
    supported = set(nvrtc.supported_archs())
    missing = [a for a in archs if blob.arch_number(a) not in supported]
    if missing:
        raise CompileSpecError(
            f"cuda backend: NVRTC {'.'.join(map(str, nvrtc.version()))} cannot compile for "
            f"{', '.join(missing)} (it takes sm_{', sm_'.join(map(str, sorted(supported)))})"
        )
    newest = max((a for a in archs if not ARCH.match(a).group(2)), key=blob.arch_number, default=None)
    out = []
    programs: dict = {}
    for shapes in signatures:
        inputs = dict(zip(plan["inputs"], shapes)) if shapes else None
        programs.update(record(plan, host, blas=True, inputs=inputs).programs)
    for p in programs:
        key = kernel_key(p.source, p.options)
        for a in archs:
            out.append(blob.Binary(key, a, "cubin", nvrtc.compile(p.source, p.options, a, "cubin", key[:12])))
        if newest is not None:
            out.append(
                blob.Binary(key, newest, "ptx", nvrtc.compile(p.source, p.options, newest, "ptx", key[:12]))
            )
    return out


class CUDACompiler(GPUCompiler):
    name = "cuda"
    spec_keys = SPEC_KEYS

    def check_specs(self, specs: list[CompileSpec]) -> None:
        super().check_specs(specs)
        flag_spec(specs, "graph", True, self.name)

    def preprocess(self, subprogram: Program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        self.check_specs(compile_specs)
        archs = []
        for spec in compile_specs:
            if spec.key == "device":
                parse_device(spec)
            elif spec.key == "arch":
                archs = parse_arch(spec)
        result = super().preprocess(subprogram, compile_specs)
        plan = json.loads(result.processed)
        binaries = []
        if archs:
            consts = {}
            for op in subprogram.main.body.operations:
                for v in op.inputs:
                    if v is not None and v.is_constant:
                        consts[v.name] = v.const_value
            host = {int(i): consts[name] for i, name in plan["weights"].items() if name in consts}
            # A symbolic plan's kernels are known at the signatures the ``shapes`` spec lists; other
            # signatures compile at init (NVRTC through CuPy, cached).
            binaries = compile_kernels(plan, host, archs, planned_shapes(plan, compile_specs, "cuda"))
        return PreprocessResult(blob.pack(plan, binaries), result.debug_handle_map)
