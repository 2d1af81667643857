"""The `opencl` backend: the shared GPU kernels (``kernels_cl``, generated elementwise) run by pyopencl.

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
    description="OpenCL 1.2 through pyopencl (PoCL or Intel's runtime on CPUs): fused elementwise, GEMM, conv, pooling, norms, layout",
)
