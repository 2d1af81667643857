"""CPU kernels (numpy): one function per operator, found by (domain, op type).

A kernel is called as ``fn(ctx, *inputs, **attributes)``: inputs in schema order (None for an
omitted optional one, trailing omitted ones left out), every schema attribute as a keyword
(its default, or None). It returns one array, or a tuple with one entry per output.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

KERNELS: dict[tuple[str, str], Callable] = {}

# Modules that register kernels; imported on first lookup.
_MODULES = (
    "elementwise",
    "linalg",
    "nn",
    "normalization",
    "reduction",
    "tensor",
    "indexing",
    "quantization",
    "recurrent",
    "control",
    "sequence",
    "signal",
    "text",
    "ml",
    "training",
    "random",
    "detection",
    "plumbing",
    "delegate",
)
_loaded = False


def kernel(*names: str, domain: str = ""):
    """Register the decorated function as the kernel of the named ops."""

    def wrap(fn):
        for n in names:
            KERNELS[(domain, n)] = fn
        return fn

    return wrap


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for m in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{m}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{m}":
                raise


def find(domain: str, op_type: str) -> Callable | None:
    _load_all()
    return KERNELS.get(("" if domain == "ai.onnx" else domain, op_type))


def all_kernels() -> dict[tuple[str, str], Callable]:
    _load_all()
    return dict(KERNELS)
