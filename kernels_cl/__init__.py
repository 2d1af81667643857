"""OpenCL C kernel sources shared by the OpenCL backend and (through a prelude) the CUDA backend."""
