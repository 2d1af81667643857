"""The compile half of the `opencl` backend: the shared GPU op table and plan, with OpenCL's specs."""

from __future__ import annotations

from ..gpu.compiler import GPUCompiler

SPEC_KEYS = {"device": "OpenCL device: 'P:D' (platform, device index), 'D' (index), or a name substring"}


class OpenCLCompiler(GPUCompiler):
    name = "opencl"
    spec_keys = SPEC_KEYS
