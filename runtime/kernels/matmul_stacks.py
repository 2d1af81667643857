"""MatMul's prepared call for products of two stacks of matrices (attention's Q·Kᵀ and
weights·V, [B, H, M, K] by [B, H, K, N], broadcasting as numpy does): the kernel's numpy matmul
(runtime/kernels/linalg.py), into the output's arena view instead of an array it allocates.

numpy's matmul calls BLAS once per matrix of the stack where each operand and the output have a
unit stride in one of their last two axes, and its own loop otherwise; a C-contiguous arena view
qualifies as the array numpy allocates does, so each matrix takes the same path and gets the
same bits. Operands in any layout (a Transpose's view) are taken as they are, as the kernel
takes them.

Only products of matrices by matrices (at least two rows on the left and two columns on the
right): there numpy calls BLAS's gemm, whose bits did not depend on the operands' layouts (a
transposed copy of either or both gave the same products, measured with OpenBLAS for float32 and
float64 from 2x16x9 to 400x400x64). A product with one row or one column goes to gemv, whose
sums run in another order for a transposed operand than for a contiguous one: a loop's step reads
a contiguous copy of a value that evaluate's kernel reads as a Transpose's view (ONNX's gated
linear-attention cases), so those stay the kernel's. Operands that share memory (``a @ a.T``,
which numpy computes by syrk) go to the kernel too."""

from __future__ import annotations

import functools

import numpy as np

_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


def stacked_call(inputs, output):
    """The call for float32/float64 operands of the output's type, the left of rank 2 or more
    with two rows or more, the right a stack (rank 3 or more: a left stack by a right matrix is
    the kernel's product of rows, ``linalg._MatMulCall``) with two columns or more; None
    otherwise."""
    (a_type, a_shape), (b_type, b_shape) = inputs
    dtype, shape = output
    if dtype not in _WIDE or a_type != dtype or b_type != dtype:
        return None
    if len(a_shape) < 2 or len(b_shape) < 3 or a_shape[-2] < 2 or b_shape[-1] < 2:
        return None
    try:
        batch = np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    except ValueError:
        return None
    if a_shape[-1] != b_shape[-2] or tuple(shape) != batch + (a_shape[-2], b_shape[-1]):
        return None
    return _StackedMatMulCall()


class _StackedMatMulCall:
    __slots__ = ()
    any_layout = True

    def __call__(self, out, a, b):
        if not out.flags.c_contiguous or np.may_share_memory(a, b):
            raise TypeError("not the declared layout")
        np.matmul(a, b, out=out, casting="no")

    def bind(self, out, a, b):
        return functools.partial(np.matmul, a, b, out=out)
