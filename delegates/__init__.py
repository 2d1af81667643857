"""Backend delegates: the backend interface, the registry, and the CUDA and OpenCL backends."""
