"""The prepared call of Where (``kernels.prepared``): Y copied into the output, then X where the
condition holds; bound, a condition of one element (a streaming model's "variables initialized"
flag choosing between its states and their initial values) is one copy of the input it picks."""

from __future__ import annotations

import functools

import numpy as np

from . import prepared
from .elementwise import _plain


@prepared("Where")
def _where_call(attrs, inputs, output):
    cond, x, y = inputs if len(inputs) == 3 else (None, None, None)
    if cond is None or cond[0] != np.bool_ or not _plain(output) or x[0] != output[0] or y[0] != output[0]:
        return None
    return _WhereCall()


class _WhereCall:
    """Where into ``out``: Y copied, then X copied where the condition holds. ``out`` may reuse an
    input's memory: the condition and X are copied first where they share it. Bound, that is
    decided once and each run is the two copies."""

    __slots__ = ()

    def __call__(self, out, c, a, b):
        _check_where(out, c, a, b)
        choose = c.copy() if np.may_share_memory(c, out) else c
        keep = a.copy() if np.may_share_memory(a, out) else a
        _where_into(out, choose, keep, b)

    def bind(self, out, c, a, b):
        _check_where(out, c, a, b)
        if c.size == 1 and not np.may_share_memory(c, out):
            # one condition for all (a streaming model's "variables initialized" flag): one copy
            return functools.partial(_where_one, out, c.reshape(()), a, b)
        if np.may_share_memory(c, out) or np.may_share_memory(a, out):
            return functools.partial(self, out, c, a, b)
        return functools.partial(_where_into, out, c, a, b)


def _check_where(out, c, a, b) -> None:
    if a.dtype != out.dtype or b.dtype != out.dtype or c.dtype != np.bool_:
        raise TypeError("not the declared types")


def _where_one(out, c, a, b) -> None:
    """Where with a 0-d condition: X or Y, whichever it picks, copied (broadcast) into out."""
    np.copyto(out, a if c[()] else b, casting="no")


def _where_into(out, c, a, b) -> None:
    np.copyto(out, b, casting="no")
    np.copyto(out, a, casting="no", where=c)
