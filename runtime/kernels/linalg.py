"""Matrix product kernels: MatMul, Gemm, Einsum, Det, com.microsoft::Inverse and the quantized
integer products."""

from __future__ import annotations

import functools

import numpy as np

from offload.errors import KernelError, ShapeError

from . import kernel, prepared
from ._util import out_for
from .matmul_stacks import stacked_call


def widened(x):
    """``x`` in a type numpy computes fast and accurately in: narrow floats widen to float32.

    float16, bfloat16 and the float8 types have no BLAS path (bfloat16 and float8 none at
    all); accumulating them in float32 is also what the reference runtimes do.
    """
    x = np.asarray(x)
    if x.dtype.kind in "iub" or x.dtype in (np.float32, np.float64):
        return x
    return x.astype(np.float32)


def _matmul(a, b, out=None):
    x, y = _gemv_ready(widened(a), widened(b))
    return np.matmul(x, y, out=out).astype(np.asarray(a).dtype, copy=False)


def _one_row_or_column(a, b) -> bool:
    return a.ndim < 2 or b.ndim < 2 or a.shape[-2] == 1 or b.shape[-1] == 1


def _gemv_ready(a, b):
    """numpy hands a product of one row or one column to BLAS's gemv, whose sums follow the
    operands' memory layout (one row by a transposed [256, 96] stack: 1e-5 from the product by
    its contiguous copy); such a product reads C-contiguous operands, so that a Transpose's view
    and a copy of it give the same bits wherever either is held (a decoder Loop's bound steps and
    offload.evaluate). Products of more rows and columns take numpy's matmul of any layout."""
    if _one_row_or_column(a, b):
        return np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a, b


def _product_out(ctx, a, b):
    """The planned buffer for a @ b when it can take the product directly (2-D float operands)."""
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind != "f":
        return None
    return out_for(ctx, 0, (a.shape[0], b.shape[1]), a.dtype)


def _rows(a, b):
    """A stacked float a [..., M, K] times a matrix b [K, N] as one product of a's rows
    [... * M, K] (a view where a is C-contiguous, else a contiguous copy), where a is of b's
    type; else None. numpy's matmul makes a product per matrix of the stack: the exported
    recurrent nets' heads, [16, 1, 48] by [48, 5], were 16 products of one row each (as
    onnxruntime does, one product of 16 rows instead); ViT-B/16's MLP at batch 2, a transposed
    [197, 2, 768] by [768, 3072], was 197 products reading the weight 197 times (196 ms against
    26 ms for the copy and one product). The copy reads a once, the product reads it N times:
    it is always the cheaper. The prepared call (``_MatMulCall``) gets C-contiguous operands
    only and reshapes them alike, so both compute the same product of the same rows."""
    if a.ndim < 3 or b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind != "f" or not a.size:
        return None
    return np.ascontiguousarray(a).reshape(-1, a.shape[-1])


@kernel("MatMul")
def matmul(ctx, A, B):
    a, b = widened(A), widened(B)
    rows = _rows(a, b)
    if rows is not None:
        shape = a.shape[:-1] + b.shape[1:]
        out = out_for(ctx, 0, shape, a.dtype)
        rows, b = _gemv_ready(rows, b)
        y = np.matmul(rows, b, out=None if out is None else out.reshape(rows.shape[0], -1))
        return (y.reshape(shape) if out is None else out).astype(A.dtype, copy=False)
    return _matmul(A, B, _product_out(ctx, a, b))


@prepared("MatMul")
def _matmul_call(attrs, inputs, output):
    """MatMul of float32 or float64 operands of the output's type, the left one a matrix or a
    stack of them and the right one a matrix: the kernel's own call, numpy's matmul into the
    arena view (``_product_out``, a stack by its rows: ``_rows``). Products of two stacks:
    ``matmul_stacks``."""
    if len(inputs) != 2 or output is None or output[0] not in (np.float32, np.float64):
        return None
    if not all(i is not None and i[0] == output[0] for i in inputs):
        return None
    (_, a_shape), (_, b_shape) = inputs
    if len(b_shape) > 2:
        return stacked_call(inputs, output)
    if len(b_shape) != 2 or len(a_shape) < 2 or (len(a_shape) > 2 and 0 in a_shape):
        return None
    return _MatMulCall()


class _MatMulCall:
    __slots__ = ()
    # Strided operands (a Transpose's view) too, each as the kernel computes it: a strided stack
    # by the rows of its contiguous copy (``_rows``), a strided matrix by numpy's matmul of it.
    any_layout = True

    def __call__(self, out, a, b):
        if a.ndim > 2:
            if not out.flags.c_contiguous:
                raise TypeError("not the declared layout")
            a = _rows(a, b) if not a.flags.c_contiguous else a.reshape(-1, a.shape[-1])
            if a is None:
                raise TypeError("not the declared types")
            out = out.reshape(-1, out.shape[-1])
        a, b = _gemv_ready(a, b)
        np.matmul(a, b, out=out, casting="no")

    def bind(self, out, a, b):
        if _one_row_or_column(a, b) and not (a.flags.c_contiguous and b.flags.c_contiguous):
            return functools.partial(self, out, a, b)  # the copies at each call, as the kernel's
        if a.ndim > 2:
            a, out = a.reshape(-1, a.shape[-1]), out.reshape(-1, out.shape[-1])
        return functools.partial(np.matmul, a, b, out=out)


@prepared("Gemm")
def _gemm_call(attrs, inputs, output):
    """Gemm of float32 or float64 matrices of the output's type (C, if given, of it too): the
    kernel's calls into the arena view, C · beta made once where C is a constant of the file."""
    if len(inputs) not in (2, 3) or output is None or output[0] not in (np.float32, np.float64):
        return None
    if not all(i is not None and i[0] == output[0] for i in inputs):
        return None
    if len(inputs[0][1]) != 2 or len(inputs[1][1]) != 2:
        return None
    return _GemmCall(attrs["alpha"], attrs["beta"], attrs["transA"], attrs["transB"])


class _GemmCall:
    __slots__ = ("alpha", "beta", "trans_a", "trans_b")

    def __init__(self, alpha, beta, trans_a, trans_b):
        self.alpha, self.beta, self.trans_a, self.trans_b = alpha, beta, trans_a, trans_b

    def __call__(self, out, a, b, c=None):
        self.bind(out, a, b, c)()

    def bind(self, out, a, b, c=None):
        a, b = a.T if self.trans_a else a, b.T if self.trans_b else b
        if a.shape[-1] != b.shape[0] or (a.shape[0], b.shape[1]) != out.shape:
            raise TypeError("not the declared shapes")
        alpha, beta = self.alpha, self.beta
        if c is not None and beta != 1.0 and not c.flags.writeable:  # a constant: scaled once
            c, beta = c * beta, 1.0
        matmul, multiply, add = np.matmul, np.multiply, np.add

        def run():
            matmul(a, b, out=out)
            if alpha != 1.0:
                multiply(out, alpha, out=out)
            if c is not None:
                add(out, c if beta == 1.0 else c * beta, out=out)

        return run


@kernel("Gemm")
def gemm(ctx, A, B, C=None, *, alpha, beta, transA, transB):
    a = widened(A.T if transA else A)
    b = widened(B.T if transB else B)
    out = _product_out(ctx, a, b)
    y = np.matmul(a, b, out=out)
    if out is not None:
        if alpha != 1.0:
            np.multiply(y, alpha, out=y)
        if C is not None:
            np.add(y, widened(C) if beta == 1.0 else widened(C) * beta, out=y)
        return y.astype(A.dtype, copy=False)
    # Scaling by exactly 1 is skipped so that integer products stay integers.
    if alpha != 1.0:
        y = y * alpha
    if C is not None:
        y = y + (widened(C) if beta == 1.0 else widened(C) * beta)
    return y.astype(A.dtype, copy=False)


@kernel("Einsum")
def einsum(ctx, *Inputs, equation):
    out = np.einsum(equation.replace(" ", ""), *(widened(x) for x in Inputs), optimize=True)
    return np.asarray(out).astype(Inputs[0].dtype, copy=False)


@kernel("Det")
def det(ctx, X):
    x = widened(X)
    return np.asarray(np.linalg.det(x)).astype(X.dtype, copy=False)


@kernel("Inverse", domain="com.microsoft")
def inverse(ctx, X):
    """com.microsoft::Inverse: each [n, n] matrix of X inverted, in float64 (LU with partial
    pivoting) and rounded once to X's type; a singular matrix is an error naming the op."""
    if X.ndim < 2 or X.shape[-1] != X.shape[-2]:
        raise ShapeError(f"com.microsoft::Inverse: X has shape {list(X.shape)}, expected [..., n, n]")
    try:
        return np.linalg.inv(np.asarray(X, np.float64)).astype(X.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise KernelError("com.microsoft::Inverse: X holds a singular matrix, which has no inverse") from None


def _row_param(v, a):
    """A per-row zero point or scale of ``a`` given as a vector of length M, as a column."""
    v = np.asarray(v)
    if v.ndim == 1 and v.size > 1 and np.ndim(a) >= 2:
        return v.reshape(-1, 1)
    return v


def exact_float(terms: int, *operands) -> type:
    """float32 where every partial sum of ``terms`` products of the (zero-point-shifted) integer
    operands is below 2**24 in magnitude (each product and each sum then exact, in whatever order
    a product sums them), else float64 (exact for every sum of 8-bit products)."""
    bound = float(terms)
    for x in operands:
        bound *= float(np.abs(x).max(initial=0))
    return np.float32 if bound < 2**24 else np.float64


def shifted(x, zero_point, per_row: bool = False) -> np.ndarray:
    """8-bit integers less their zero point, as float32 (exact: |x - zp| <= 255)."""
    x = np.asarray(x).astype(np.float32)
    if zero_point is None:
        return x
    zp = _row_param(zero_point, x) if per_row else np.asarray(zero_point)
    return x - zp.astype(np.float32)


def exact_product(a: np.ndarray, w: np.ndarray, w_max: float, w_l1: float | None = None) -> np.ndarray:
    """``a @ w`` of integer-valued float32 operands (``w`` a matrix whose largest magnitude is
    ``w_max``), exactly: float32 products over slices of the inner axis short enough that every
    partial sum stays below 2**24 (any summation order is then exact), the slices' sums added in
    float64. float32 operands read half the bytes of float64 ones. With ``w_l1``, the largest L1
    norm of a column of w: any partial sum of a column's products is at most max|a| · w_l1, so
    below 2**24 one float32 product is exact, whatever k (returned as float32)."""
    a_max = float(np.abs(a).max(initial=0))
    k, shape = a.shape[-1], a.shape[:-1] + w.shape[1:]
    a = a.reshape(-1, k)  # a stack of rows as one product: each row alone would read all of w
    if w_l1 is not None and a_max * w_l1 < 2**24:
        return np.matmul(a, w).reshape(shape)
    rows = k if a_max * w_max == 0 else max(1, int(2**24 // (a_max * w_max)))
    if rows >= k:
        return np.matmul(a, w).astype(np.float64).reshape(shape)
    total = None
    for start in range(0, k, rows):
        part = np.matmul(a[:, start : start + rows], w[start : start + rows])
        total = part.astype(np.float64) if total is None else np.add(total, part, out=total)
    return total.reshape(shape)


def _integer_product(a, b, a_zero_point, b_zero_point):
    """(a - a_zp) @ (b - b_zp), exact (``exact_product``), as float64."""
    w = shifted(b, b_zero_point)
    if w.ndim != 2:  # a stack of right operands: float64 holds every sum of 8-bit products
        return np.matmul(shifted(a, a_zero_point, per_row=True).astype(np.float64), w.astype(np.float64))
    return exact_product(shifted(a, a_zero_point, per_row=True), w, float(np.abs(w).max(initial=0)))


@prepared("MatMulInteger")
def _matmul_integer_call(attrs, inputs, output):
    if len(inputs) < 2 or output is None or any(i is None for i in inputs[:2]) or len(inputs[1][1]) != 2:
        return None
    return _MatMulIntegerCall()


class _MatMulIntegerCall:
    """MatMulInteger into its int32 arena view. With B and its zero point constants of the file
    (read-only arrays), B less its zero point is made in float32 once and kept with its largest
    magnitude and column L1 norm (``exact_product`` reads them each run: one float32 product
    where the norm allows), bound or called."""

    __slots__ = ("last",)

    def __init__(self):
        self.last = None  # (b, b_zero_point, w, w_max, w_l1): one tuple, replaced whole (threads)

    def __call__(self, out, a, b, a_zero_point=None, b_zero_point=None):
        self.bind(out, a, b, a_zero_point, b_zero_point)()

    def bind(self, out, a, b, a_zero_point=None, b_zero_point=None):
        if b.flags.writeable or (b_zero_point is not None and b_zero_point.flags.writeable):
            return functools.partial(_into, out, a, b, a_zero_point, b_zero_point)
        last = self.last
        if last is None or last[0] is not b or last[1] is not b_zero_point:
            w = shifted(b, b_zero_point)
            w_l1 = float(np.abs(w).sum(axis=0, dtype=np.float64).max(initial=0))
            last = self.last = (b, b_zero_point, w, float(np.abs(w).max(initial=0)), w_l1)
        w, w_max, w_l1 = last[2], last[3], last[4]

        def run():
            y = exact_product(shifted(a, a_zero_point, per_row=True), w, w_max, w_l1)
            np.copyto(out, y, casting="unsafe")

        return run


def _into(out, a, b, a_zero_point, b_zero_point) -> None:
    np.copyto(out, _integer_product(a, b, a_zero_point, b_zero_point), casting="unsafe")


def saturate(y, dtype):
    """Float values rounded half to even and clipped to an integer type's range."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(y), info.min, info.max).astype(dtype)


@kernel("MatMulInteger")
def matmul_integer(ctx, A, B, a_zero_point=None, b_zero_point=None):
    return _integer_product(A, B, a_zero_point, b_zero_point).astype(np.int32)


@kernel("QLinearMatMul")
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    acc = _integer_product(a, b, a_zero_point, b_zero_point)
    scale = (
        _row_param(a_scale, a).astype(np.float64)
        * np.asarray(b_scale, np.float64)
        / np.asarray(y_scale, np.float64)
    )
    return saturate(acc * scale + np.asarray(y_zero_point, np.float64), y_zero_point.dtype)
