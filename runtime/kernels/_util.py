"""Small helpers shared by the kernel modules."""

from __future__ import annotations

import math
import os
import threading
import warnings

import numpy as np

from offload.errors import ShapeError, UnsupportedOpError
from offload.ir.types import MAX_TENSOR_BYTES, TENSOR_BUDGET

# The largest tensor a shape-making kernel (Tile, Expand, ConstantOfShape, Range, Pad, OneHot,
# Resize, EyeLike, the random ops …) computes, and the largest static shape type inference
# accepts; past it the shape is refused before numpy allocates, so a hostile repeat count or a
# Reshape to 10¹² elements is a ShapeError, not a crash or an OOM kill. It is the machine's
# tensor budget (ir/budget.py); environment variable OFFLOAD_MAX_TENSOR_BYTES sets it (bytes).
MAX_RESULT_BYTES = MAX_TENSOR_BYTES


def compiled_loops():
    """The compiled loops (runtime/kernels/loops.py, numba), or None where numba is not
    installed or ``OFFLOAD_JIT=0`` turns them off; the kernels then take their numpy paths.
    Imported by the first kernel or plan that would use them, so that a process that never
    does never imports numba; under a lock, so that no thread plans without them while another
    imports them (a kernel and the .pte's prepared call must choose alike: their results are
    compared bit for bit)."""
    global _LOOPS
    if _LOOPS is None:
        with _LOOPS_LOCK:
            if _LOOPS is None:
                _LOOPS = _import_loops() if os.environ.get("OFFLOAD_JIT", "1") != "0" else False
    return _LOOPS or None


def _import_loops():
    try:
        from . import loops
    except ImportError:  # numba missing: the numpy paths
        return False
    except Exception as error:  # numba there but unusable (no writable cache directory, say)
        warnings.warn(
            f"offload: the compiled CPU loops are off ({type(error).__name__}: {error}); the numpy "
            "paths run instead (same results, slower convolutions); set NUMBA_CACHE_DIR to a "
            "writable folder, or OFFLOAD_JIT=0 to silence this",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return loops


_LOOPS = None  # not looked for yet; False: not there
_LOOPS_LOCK = threading.Lock()


def same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a and b start at the same address with the same strides: an elementwise op may
    then write one while it reads the other, each element after it is read."""
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.strides == b.strides


def normalize_axis(axis: int, rank: int, op: str = "") -> int:
    """A possibly negative axis as an index in [0, rank)."""
    if not -rank <= axis < max(rank, 1):
        raise UnsupportedOpError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def normalize_axes(axes, rank: int, op: str = "") -> tuple[int, ...]:
    return tuple(normalize_axis(int(a), rank, op) for a in np.asarray(axes).reshape(-1))


def like(x, y):
    """``y`` as an array with ``x``'s element type (ONNX ops keep their input's type)."""
    return np.asarray(y).astype(np.asarray(x).dtype, copy=False)


def out_for(ctx, i: int, shape, dtype) -> np.ndarray | None:
    """The preallocated buffer for output ``i`` when it has exactly this shape and dtype.

    A .pte Method offers each planned output's arena view; a kernel that writes its result
    there allocates nothing for it. Kernels must compute the same values either way.
    """
    out = ctx.out(i)
    if out is None or out.shape != tuple(shape) or out.dtype != dtype or not out.flags.c_contiguous:
        return None
    return out


def unsupported(op: str, what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{op}: {what} is not supported by the CPU kernels")


def check_result(shape, dtype, op: str) -> tuple[int, ...]:
    """``shape`` when a result of it and ``dtype`` fits MAX_RESULT_BYTES; ShapeError otherwise."""
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ShapeError(f"{op}: negative dimension in the result shape {shape}")
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes > MAX_RESULT_BYTES:
        raise ShapeError(
            f"{op}: a result of shape {shape} would take {nbytes} bytes, over the {MAX_RESULT_BYTES}-byte "
            f"limit ({TENSOR_BUDGET.explain(MAX_RESULT_BYTES)})"
        )
    return shape


# numpy's maximum / minimum with a scalar (or a 0-d array, or a stride-0 view) take a loop 3-5x
# slower than with a full array of the same shape (numpy 2.4, float32, 2e5 elements: 62 µs vs
# 18); add and multiply do not. ``filled`` gives such a full operand without a pass to make it: a
# view of a buffer kept per (dtype, value), grown as needed. Zeros come from np.zeros, whose
# untouched pages all map the kernel's zero page (no memory, reads from cache).
FILLED_LIMIT = 1 << 24  # elements: past it, the slow scalar loop rather than the memory
_FILLED: dict[tuple[np.dtype, bytes], np.ndarray] = {}
_FILLED_LOCK = threading.Lock()


def filled(value, dtype, shape) -> np.ndarray:
    """A read-only array of ``shape`` full of ``value`` (of ``dtype``): for numpy's maximum and
    minimum, whose scalar loop is slow; a 0-d array past FILLED_LIMIT elements."""
    dtype = np.dtype(dtype)
    scalar = np.asarray(value, dtype)
    n = math.prod(shape)
    if n > FILLED_LIMIT or scalar.ndim:
        return scalar
    key = (dtype, scalar.tobytes())
    with _FILLED_LOCK:
        buffer = _FILLED.get(key)
        if buffer is None or buffer.size < n:
            size = max(n, 2 * buffer.size if buffer is not None else 4096)
            buffer = np.zeros(size, dtype) if not scalar.any() else np.full(size, scalar, dtype)
            buffer.flags.writeable = False
            _FILLED[key] = buffer
    return buffer[:n].reshape(shape)
