"""Prepared calls of the comparisons and logic ops (Equal, Less, And, Not, IsNaN…): one ufunc into the bool output.

The kernels (``elementwise._predicate``) widen a narrow float to float32 and apply the ufunc;
on inputs of one type numpy computes in directly (a bool, an integer, float32 or float64) the
ufunc's result is the same, written into the output's arena view instead of a new array (a
decoder loop's step counter compared with its trip limit at every trip). ``casting="no"``
(``UfuncCall``) refuses an input of another type than the file declares.
"""

from __future__ import annotations

import numpy as np

from . import UfuncCall, prepared
from .elementwise import PREDICATES


def _predicate_call(fn):
    def factory(attrs, inputs, output):
        if output is None or output[0] != np.bool_ or not inputs or inputs[0] is None:
            return None
        dtype = inputs[0][0]
        if dtype not in (np.bool_, np.float32, np.float64) and dtype.kind not in "iu":
            return None
        if not all(s is not None and s[0] == dtype for s in inputs):
            return None
        return UfuncCall(fn)

    return factory


for _name, _fn in PREDICATES.items():
    prepared(_name)(_predicate_call(_fn))
