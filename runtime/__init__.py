"""The runtime: CPU kernels, the reference evaluator, and the .pte loader and executor."""

from .evaluate import KernelContext, evaluate
from .module import Method, Module, load
from .options import RunOptions

__all__ = ["KernelContext", "Method", "Module", "RunOptions", "evaluate", "load"]
