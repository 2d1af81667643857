"""What the GPU backends share: the partition plan, the capability table, the kernel launchers and
the runtime half (``runtime.py``: ``GPURuntime``, whose device hooks each backend fills).

A launcher turns one plan step into kernel launches over ``kernels_cl`` sources (or generated
ones) through a ``Builder`` (``api.py``). The OpenCL backend's builder builds them with
pyopencl, the CUDA backend's with NVRTC behind the prelude header: one launcher and one kernel
source per op, so the numerics PoCL checks are the numerics a GPU runs.
"""
