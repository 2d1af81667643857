"""The pass registry: ``group::name`` → the function, filled by the ``@graph_pass`` decorator."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from offload.errors import OffloadError
from offload.ir import Program

PassFn = Callable[[Program], bool]

PASSES: dict[str, PassFn] = {}

# The catalog's groups; each is a subpackage holding one module per pass.
GROUPS = (
    "cleanup",
    "optimize_activation",
    "optimize_conv",
    "optimize_elementwise_binary",
    "optimize_linear",
    "optimize_normalization",
    "optimize_quantization",
    "optimize_repeat_ops",
    "optimize_tensor_operation",
    "preprocess",
    "quantization",
)
_loaded = False


class UnknownPassError(OffloadError, KeyError):
    """A pass name that no registered pass has."""

    def __str__(self) -> str:
        return self.args[0]


def graph_pass(name: str):
    """Register the decorated ``fn(program) -> changed`` as pass ``name`` (``group::name``)."""
    group, sep, short = name.partition("::")
    if not sep or group not in GROUPS or not short:
        raise ValueError(f"pass name {name!r} is not 'group::name' with a catalog group")

    def wrap(fn: PassFn) -> PassFn:
        fn.pass_name = name
        PASSES[name] = fn
        return fn

    return wrap


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for group in GROUPS:  # a group missing from an install is a broken install: ImportError says which
        package = importlib.import_module(f"{__package__}.{group}")
        for info in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{info.name}")


def known_passes() -> list[str]:
    """Every registered pass name, sorted."""
    _load_all()
    return sorted(PASSES)


def resolve(name: str) -> PassFn:
    """The pass called ``name``; an unknown name raises UnknownPassError listing the known ones."""
    _load_all()
    fn = PASSES.get(name)
    if fn is None:
        raise UnknownPassError(f"unknown pass '{name}'; known passes: {', '.join(known_passes())}")
    return fn
