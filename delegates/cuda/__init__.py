"""The `cuda` backend: the shared GPU kernels (``kernels_cl`` behind ``cuda_prelude.h``) run by CuPy.

Each half is imported only when asked for: the runtime half needs CuPy and a CUDA driver, the
compile half needs NVRTC only when the ``arch`` spec asks it to compile kernels ahead of time,
and importing this package needs neither.
"""

from ..backend import Backend


def _compiler():
    from .compiler import CUDACompiler

    return CUDACompiler()


def _runtime():
    from .runtime import CUDARuntime

    return CUDARuntime()


backend = Backend(
    name="cuda",
    compiler=_compiler,
    runtime=_runtime,
    description="CUDA through CuPy (NVRTC kernels from the OpenCL C sources, cuBLAS GEMM): "
    "the opencl backend's ops",
)
