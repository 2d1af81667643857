"""Scratch buffers of the planned kernels (conv, pools, BatchNormalization) and runs of their calls."""

from __future__ import annotations

import functools
import threading
import weakref
from math import prod

import numpy as np

_SCRATCH = threading.local()  # each thread's column buffer (kernels may run on several threads)
# Column matrices up to this size stay allocated between calls; a larger one is allocated per
# call (its product takes far longer than the allocation, and it would stay held).
SCRATCH_BYTES = 64 << 20


def _scratch(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` in this thread's reused buffer (fresh when large)."""
    nbytes = prod(shape) * np.dtype(dtype).itemsize
    if nbytes > SCRATCH_BYTES:
        return np.empty(shape, dtype)
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.nbytes < nbytes:
        buf = _SCRATCH.buf = np.empty(max(nbytes, 1 << 20), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


class _Buffers:
    """Scratch arrays by (role, shape, dtype, fill), filled when made: convolutions of the same padded
    geometry share their padding buffer (only its interior is ever written), and all share their
    accumulators. One instance per thread for kernels and unbound calls (``_thread_buffers``), one
    per arena set for bound calls (``_arena_buffers``): the runs of one set never overlap."""

    __slots__ = ("__weakref__", "arrays", "nbytes")

    def __init__(self):
        self.arrays: dict[tuple, np.ndarray] = {}
        self.nbytes = 0

    def get(self, role: tuple, shape: tuple, dtype, fill=0) -> np.ndarray:
        key = (role, tuple(shape), np.dtype(dtype), fill)
        array = self.arrays.get(key)
        if array is None:
            if self.nbytes > SCRATCH_BYTES:  # many geometries: start again rather than hold them all
                self.arrays.clear()
                self.nbytes = 0
            array = self.arrays[key] = np.full(shape, fill, dtype)
            self.nbytes += array.nbytes
        return array


def _thread_buffers() -> _Buffers:
    buffers = getattr(_SCRATCH, "conv", None)
    if buffers is None:
        buffers = _SCRATCH.conv = _Buffers()
    return buffers


_ARENA_BUFFERS: dict[int, _Buffers] = {}
_ARENA_LOCK = threading.Lock()


def _arena_buffers(out: np.ndarray) -> _Buffers:
    """The buffers of the arena set that ``out`` lies in (the array at the end of its bases),
    dropped with it."""
    root = out
    while isinstance(root.base, np.ndarray):
        root = root.base
    with _ARENA_LOCK:
        buffers = _ARENA_BUFFERS.get(id(root))
        if buffers is None:
            buffers = _ARENA_BUFFERS[id(root)] = _Buffers()
            weakref.finalize(root, _ARENA_BUFFERS.pop, id(root), None)
    return buffers


def _run_calls(calls: tuple) -> None:
    for call in calls:
        call()


class _KeptCalls:
    """A prepared call that makes its numpy calls (``_calls(out, args)``) once per arena set when
    bound and, called unbound, keeps those it made for the last arrays it got (``last``)."""

    __slots__ = ()

    def __call__(self, out, *args):
        last = self.last
        if (
            last is None
            or last[0] is not out
            or len(args) != len(last[1])
            or any(a is not k for a, k in zip(args, last[1]))
        ):
            last = self.last = (out, args, self._calls(out, args))
        _run_calls(last[2])

    def bind(self, out, *args):
        return functools.partial(_run_calls, self._calls(out, args))
