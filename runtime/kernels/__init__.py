"""CPU kernels (numpy): one function per operator, found by (domain, op type).

A kernel is called as ``fn(ctx, *inputs, **attributes)``: inputs in schema order (None for an
omitted optional one, trailing omitted ones left out), every schema attribute as a keyword
(its default, or None). It returns one array, or a tuple with one entry per output.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import numpy as np

from offload.errors import KernelError, OffloadError

KERNELS: dict[tuple[str, str], Callable] = {}
# Prepared calls (``@prepared``): for an op whose input and output types are known when a .pte
# method loads, ``factory(attrs, inputs, output)`` (each a (numpy dtype, shape) pair, None for
# one not known) returns ``call(out, *inputs)`` writing the op's result into ``out``, the same
# values its kernel computes, or None where it has none. The method calls it on C-contiguous
# inputs instead of the kernel, skipping the kernel's checks and context (runtime/steps.py).
# Where every input of a run of such calls is certain to be a C-contiguous array of its declared
# type (a constant, or another prepared call's arena view), the method binds each call to its
# arrays once per arena set (``bind``) and runs them back to back.
PREPARED: dict[tuple[str, str], Callable] = {}
# Prepared calls of ops with several outputs (``@prepared_outputs``): ``factory(attrs, inputs,
# outputs)``, inputs as above (None also for an omitted optional input), ``outputs`` a (numpy
# dtype, shape) pair per output, None for one that no one reads; returns ``call(outs, *inputs)``
# (``outs`` the outputs' arena views, None for those no one reads) returning a tuple with each
# read output (in its view) and None for the others, or None where it has no call. The method
# calls it on arrays of any layout (or None) and calls the kernel instead where it raises, so the
# call may leave its checks of the inputs' values to the kernel's errors.
PREPARED_OUTPUTS: dict[tuple[str, str], Callable] = {}

# Modules that register kernels; imported on first lookup.
_MODULES = (
    "elementwise",
    "add_prepared",
    "linalg",
    "conv",
    "pool",
    "sampling",
    "normalization",
    "softmax_prepared",
    "gelu_prepared",
    "layer_norm_prepared",
    "reduction",
    "reduction_prepared",
    "tensor",
    "pad_prepared",
    "conv_transpose_prepared",
    "resize_prepared",
    "where_prepared",
    "predicate_prepared",
    "indexing",
    "quantization",
    "recurrent",
    "recurrent_prepared",
    "recurrent_quantized",
    "control",
    "sequence",
    "signal",
    "image",
    "text",
    "ml",
    "ml_linear",
    "ml_linear_prepared",
    "ml_trees",
    "ml_svm",
    "training",
    "random",
    "detection",
    "detection_postprocess",
    "tflite_int8",
    "tflite_int8_prepared",
    "conv_integer_prepared",
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


def prepared(*names: str, domain: str = ""):
    """Register the decorated factory as the prepared-call maker of the named ops."""

    def wrap(factory):
        for n in names:
            PREPARED[(domain, n)] = factory
        return factory

    return wrap


def prepared_outputs(*names: str, domain: str = ""):
    """Register the decorated factory as the prepared-call maker of the named ops with several
    outputs (``PREPARED_OUTPUTS``)."""

    def wrap(factory):
        for n in names:
            PREPARED_OUTPUTS[(domain, n)] = factory
        return factory

    return wrap


class UfuncCall:
    """A prepared call that is one ufunc: ``fn(*inputs, *extra, out=out, casting="no")``.
    ``casting="no"`` refuses (TypeError) a value of another type than the file declares."""

    __slots__ = ("extra", "fn")

    def __init__(self, fn: Callable, *extra):
        self.fn, self.extra = fn, extra

    def __call__(self, out, *args):
        return self.fn(*args, *self.extra, out=out, casting="no")

    def bind(self, out, *args) -> Callable[[], object]:
        # Bound inputs are of the declared types, so no casting check; the output positional: a
        # ufunc parses keywords at every call (0.28 µs against 0.14 on 16 floats), except that
        # numpy 2.4's maximum and minimum take 1.1 µs with a positional output (0.31 keyword).
        if self.fn in _KEYWORD_OUT:
            return functools.partial(self.fn, *args, *self.extra, out=out)
        return functools.partial(self.fn, *args, *self.extra, out)


_KEYWORD_OUT = {np.maximum, np.minimum}


def bind(call: Callable, out, args: list) -> Callable[[], object]:
    """A prepared call with its output and inputs fixed: what a method calls with no arguments
    when its inputs are certain (``call.bind`` where the call has a cheaper bound form)."""
    binder = getattr(call, "bind", None)
    return binder(out, *args) if binder is not None else functools.partial(call, out, *args)


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for m in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{m}")
        except Exception as e:
            _loaded = False
            raise ImportError(
                f"kernel module {__name__}.{m} failed to import: {type(e).__name__}: {e}"
            ) from e


def invoke(fn: Callable, ctx, args: list, attrs: dict, what: str) -> tuple:
    """Run one kernel; its results as a tuple. A crash inside it becomes a KernelError naming
    ``what`` (the op) and the inputs it got; offload's own errors pass through unchanged."""
    try:
        result = fn(ctx, *args, **attrs)
    except OffloadError:
        raise
    except Exception as e:
        raise failure(what, args, e) from e
    return result if isinstance(result, tuple) else (result,)


def failure(what: str, args: list, e: Exception) -> KernelError:
    """The KernelError for a kernel that raised ``e`` on ``args``."""
    shapes = ", ".join(_describe(a) for a in args)
    return KernelError(f"{what} failed on inputs ({shapes}): {type(e).__name__}: {e}")


def _describe(a) -> str:
    if a is None:
        return "None"
    if hasattr(a, "dtype") and hasattr(a, "shape"):
        return f"{a.dtype}{list(a.shape)}"
    if isinstance(a, list):
        return f"seq[{len(a)}]"
    return type(a).__name__


def find(domain: str, op_type: str) -> Callable | None:
    _load_all()
    return KERNELS.get(("" if domain == "ai.onnx" else domain, op_type))


def find_prepared(domain: str, op_type: str) -> Callable | None:
    _load_all()
    return PREPARED.get(("" if domain == "ai.onnx" else domain, op_type))


def find_prepared_outputs(domain: str, op_type: str) -> Callable | None:
    _load_all()
    return PREPARED_OUTPUTS.get(("" if domain == "ai.onnx" else domain, op_type))


def all_kernels() -> dict[tuple[str, str], Callable]:
    _load_all()
    return dict(KERNELS)
