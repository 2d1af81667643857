"""The prepared call of a run of elementwise ops on an 8-bit tensor folded into one 256-entry
table (runtime/table_fusions.py makes the table from the ops' own kernels): one ``take`` of the
table by the input's bits (a streaming model's tail, Lookup(sigmoid) → DequantizeLinear →
QuantizeLinear to uint8: three calls made one)."""

from __future__ import annotations

import functools

import numpy as np


class _TableCall:
    """out = ``table[bits of x]``: ``table`` (256,) of out's dtype, entry u the ops' result for
    the 8-bit x whose bits read as uint8 are u. x int8 or uint8 of out's shape."""

    __slots__ = ("table",)

    def __init__(self, table: np.ndarray):
        self.table = table

    def __call__(self, out, x):
        self.bind(out, x)()

    def bind(self, out, x):
        if x.dtype.itemsize != 1 or x.dtype.kind not in "iu" or x.shape != out.shape:
            raise TypeError("not the declared input")
        if out.dtype != self.table.dtype:
            raise TypeError("not the declared output")
        # the array's own take: numpy's function adds a Python call (about 1 us a run)
        return functools.partial(self.table.take, x.view(np.uint8), None, out, "clip")
