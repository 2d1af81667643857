"""The prepared call of Add, and of Add with the activation that alone reads its sum.

``Add`` is one ufunc pass (``UfuncCall``). Where both operands have the output's shape and a
float type, the CPU executor may give it the ``Relu``, ``PRelu`` or ``LeakyRelu`` after it as
an epilogue (runtime/fusions.py, ``_fuse_epilogues``, as it gives a Conv its activation): one
pass of a compiled loop (``add_loops``) computes the sum and the activation per element, with
the two ops' bits, and the activation's step runs nothing. The graph and the .pte keep both ops.
"""

from __future__ import annotations

import functools

import numpy as np

from . import UfuncCall, prepared
from ._util import compiled_loops
from .elementwise import _one_axis, _plain

_ACTIVATIONS = ("Relu", "PRelu", "LeakyRelu")


@prepared("Add")
def _add_call(attrs, inputs, output):
    if not _plain(output) or not all(_plain(s) and s[0] == output[0] for s in inputs):
        return None
    return _AddCall(np.add, output if all(s == output for s in inputs) else None)


class _AddCall(UfuncCall):
    """Add as one ufunc pass; ``spec`` the (dtype, shape) of its operands and result where the
    three have it alike (no broadcasting), else None."""

    __slots__ = ("spec",)

    def __init__(self, fn, spec):
        super().__init__(fn)
        self.spec = spec

    def with_epilogue(self, op_type: str, attrs: dict, n_add: int, extras: list):
        """This Add followed by ``op_type`` (its first input the sum, its others constants of
        specs ``extras``) as one call, or None: only of one shape and a float type, for Relu,
        PRelu with a slope that varies along one axis at most, and LeakyRelu, with the compiled
        loops there (without them the two numpy passes stay)."""
        if self.spec is None or op_type not in _ACTIVATIONS or n_add != 2 or compiled_loops() is None:
            return None
        dtype, shape = self.spec
        if dtype.kind != "f":
            return None
        if op_type == "PRelu":
            if len(extras) != 1 or extras[0][0] != dtype:
                return None
            slope = np.broadcast_to(np.zeros((), dtype), extras[0][1])  # its shape, no memory
            split = _one_axis(shape, slope) if len(slope.shape) <= len(shape) else None
            if split is None or np.broadcast_shapes(shape, slope.shape) != shape:
                return None
            return _AddActivation(op_type, dtype, shape, split)
        if extras:
            return None
        if op_type == "LeakyRelu":
            alpha = np.array([attrs.get("alpha", 0.01)], dtype)  # as the prepared LeakyRelu rounds it
            return _AddActivation(op_type, dtype, shape, (1, 1, int(np.prod(shape))), alpha)
        return _AddActivation(op_type, dtype, shape)


class _AddActivation:
    """Add, then Relu, PRelu or LeakyRelu on the sum, in one pass (``add_loops``): the
    arguments are the Add's two operands, then PRelu's slope (a constant)."""

    __slots__ = ("alpha", "dtype", "op", "shape", "split")

    def __init__(self, op: str, dtype, shape: tuple, split: tuple | None = None, alpha=None):
        self.op, self.dtype, self.shape = op, np.dtype(dtype), tuple(shape)
        self.split, self.alpha = split, alpha  # PRelu's (outer, C, inner); LeakyRelu's slope

    def __call__(self, out, a, b, *extras):
        self.bind(out, a, b, *extras)()

    def bind(self, out, a, b, *extras):
        for v in (out, a, b):
            if v.dtype != self.dtype or v.shape != self.shape or not v.flags.c_contiguous:
                raise TypeError("not the declared types")
        loops = compiled_loops()
        if self.op == "Relu":
            return functools.partial(loops.add_relu, a, b, self.dtype.type(0), out)
        slope = self.alpha if self.op == "LeakyRelu" else extras[0]
        # the loop indexes the slope unchecked: one value per channel of the split, or one
        if slope.dtype != self.dtype or not slope.flags.c_contiguous or slope.size != self.split[1]:
            raise TypeError("not the declared types")
        split = self.split
        return functools.partial(
            loops.add_prelu, a.reshape(split), b.reshape(split), slope.reshape(-1), out.reshape(split)
        )
