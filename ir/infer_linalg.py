"""Inference rules of linear algebra: MatMul, Gemm, Einsum."""

from __future__ import annotations

from .infer_dims import _dtype, _merge_dim, _shape, _tt, broadcast_shapes
from .registry import inference
from .types import DataType, Dim


def _matmul_shape(a, b) -> tuple[Dim, ...] | None:
    """numpy.matmul's result shape: 1-D operands gain, then lose, a unit dim."""
    if a is None or b is None or len(a) == 0 or len(b) == 0:
        return None
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@inference("MatMul")
def _matmul(op, attrs):
    return [_tt(_dtype(op, 0), _matmul_shape(_shape(op, 0), _shape(op, 1)))]


@inference("MatMulInteger")
def _matmul_integer(op, attrs):
    return [_tt(DataType.INT32, _matmul_shape(_shape(op, 0), _shape(op, 1)))]


@inference("QLinearMatMul")
def _qlinear_matmul(op, attrs):
    return [_tt(_dtype(op, 7), _matmul_shape(_shape(op, 0), _shape(op, 3)))]


@inference("Gemm")
def _gemm(op, attrs):
    a, b = _shape(op, 0), _shape(op, 1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [_tt(_dtype(op, 0), None)]
    m = a[1] if attrs.get("transA") else a[0]
    n = b[0] if attrs.get("transB") else b[1]
    return [_tt(_dtype(op, 0), (m, n))]


@inference("Einsum")
def _einsum(op, attrs):
    dtype = _dtype(op, 0)
    try:
        return [_tt(dtype, _einsum_shape(attrs["equation"], [_shape(op, i) for i in range(len(op.inputs))]))]
    except (KeyError, ValueError, TypeError, AttributeError):
        return [_tt(dtype, None)]


def _einsum_terms(term: str) -> list[str]:
    """'b...ij' → ['b', '...', 'i', 'j']."""
    head, ell, tail = term.partition("...")
    return list(head) + (["..."] if ell else []) + list(tail)


def _einsum_shape(equation: str, shapes) -> tuple[Dim, ...] | None:
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = [_einsum_terms(t) for t in lhs.split(",")]
    if len(terms) != len(shapes) or any(s is None for s in shapes):
        return None
    sizes: dict[str, Dim] = {}
    ellipses = []
    for labels, shape in zip(terms, shapes):
        n_ell = len(shape) - (len(labels) - labels.count("..."))
        pos = 0
        for label in labels:
            if label == "...":
                ellipses.append(shape[pos : pos + n_ell])
                pos += n_ell
            else:
                sizes[label] = _merge_dim(sizes.get(label), shape[pos]) if label in sizes else shape[pos]
                pos += 1
    ell = broadcast_shapes(*ellipses) if ellipses else ()
    if not arrow:  # implicit output: the ellipsis, then labels seen once, alphabetically
        counts = [x for t in terms for x in t if x != "..."]
        rhs = ("..." if ellipses else "") + "".join(sorted(x for x in set(counts) if counts.count(x) == 1))
    out: list[Dim] = []
    for label in _einsum_terms(rhs):
        out.extend(ell if label == "..." else [sizes[label]])
    return tuple(out)
