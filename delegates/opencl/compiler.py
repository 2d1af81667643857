"""The compile half of the `opencl` backend: the shared GPU op table and plan, with OpenCL's specs."""

from __future__ import annotations

from ..backend import CompileSpec, CompileSpecError
from ..gpu.compiler import IMPLICIT_CONV_SPEC, PRECISION_SPEC, GPUCompiler
from ..gpu.precision import FP16_CHECK_SPEC, MIXED_SPEC
from ..gpu.specialize import MAX_SHAPES_SPEC, SHAPES_SPEC

SPEC_KEYS = {
    "device": "OpenCL device: 'P:D' (platform, device index), 'D' (index), or a substring of 'name (platform)'; unset: $OFFLOAD_OPENCL_DEVICE, else chosen (offload backends shows which and why)",
    "tuning": "none (default) | quick: time the GEMM tile sizes at init, keep the fastest (cached)",
    "precision": PRECISION_SPEC,
    "fp16_check": FP16_CHECK_SPEC,
    "mixed": MIXED_SPEC,
    "implicit_conv": IMPLICIT_CONV_SPEC,
    "max_shapes": MAX_SHAPES_SPEC,
    "shapes": SHAPES_SPEC,
}
TUNING = ("none", "quick")


class OpenCLCompiler(GPUCompiler):
    name = "opencl"
    spec_keys = SPEC_KEYS

    def check_specs(self, specs: list[CompileSpec]) -> None:
        super().check_specs(specs)
        for spec in specs:
            if spec.key == "tuning" and spec.text() not in TUNING:
                raise CompileSpecError(f"opencl backend: tuning={spec.text()!r}, takes one of {list(TUNING)}")
