"""The `opencl` backend: float32 elementwise ops, MatMul and Gemm as OpenCL C kernels (pyopencl).

Each half is imported only when asked for: the runtime half needs pyopencl, the compile half
does not, and importing this package needs neither.
"""

from ..backend import Backend


def _compiler():
    from .compiler import OpenCLCompiler

    return OpenCLCompiler()


def _runtime():
    from .runtime import OpenCLRuntime

    return OpenCLRuntime()


backend = Backend(
    name="opencl",
    compiler=_compiler,
    runtime=_runtime,
    description="OpenCL 1.2 through pyopencl: float32 elementwise ops (broadcasting), MatMul, Gemm",
)
