"""The runtime: CPU kernels and the reference evaluator (the .pte loader and executor join later)."""

from .evaluate import KernelContext, evaluate

__all__ = ["KernelContext", "evaluate"]
