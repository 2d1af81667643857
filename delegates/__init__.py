"""Backend delegates: the backend interface, the registry, and the CUDA and OpenCL backends."""

from . import registry
from .backend import (
    Availability,
    Backend,
    BackendCompiler,
    BackendRuntime,
    CompileSpec,
    CompileSpecError,
    OpCapability,
    PreprocessResult,
    Support,
)
from .registry import BackendEntry

__all__ = [
    "Availability",
    "Backend",
    "BackendCompiler",
    "BackendEntry",
    "BackendRuntime",
    "CompileSpec",
    "CompileSpecError",
    "OpCapability",
    "PreprocessResult",
    "Support",
    "registry",
]
