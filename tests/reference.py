"""Independent references for the tests, and tolerances derived from the number format.

A test that compares two of offload's paths (a .pte run with offload.evaluate, a backend with
the CPU evaluator) also holds one of them to a reference that shares no kernel with offload:
onnxruntime on the same ONNX model, or numpy in float64. The tolerances come from the format's
unit roundoff u (half the distance from 1 to the next number) and the op: a sum of n products
computed in any order is within n·u·Σ|aᵢbᵢ| of the exact sum (the classic bound), so two
implementations are within twice that of each other (docs/testing.md).
"""

from __future__ import annotations

import numpy as np


def unit_roundoff(dtype) -> float:
    """u of a float type: 2**-24 for float32, 2**-11 for float16, 2**-53 for float64."""
    return float(np.finfo(dtype).eps) / 2


def sum_tolerance(dtype, terms: int) -> float:
    """The relative distance two implementations of a sum of ``terms`` rounded products (each
    within terms·u of the exact sum, whatever the order) may be apart: 2·terms·u."""
    return 2 * terms * unit_roundoff(dtype)


def onnxruntime_outputs(model, feeds: dict) -> dict:
    """onnxruntime's CPU results for an ONNX model (bytes, a path or a ModelProto), by name."""
    import onnxruntime as ort

    if not isinstance(model, (bytes, str)):
        model = model.SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def assert_close(got, want, *, rtol: float, scale=None, err_msg: str = "") -> None:
    """|got - want| <= rtol * scale elementwise, with the same dtype and shape; ``scale``: the
    magnitude the error is relative to (by default the largest |want|, at least 1 ulp of it),
    as for sums whose terms are of that size."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (err_msg, got.dtype, got.shape, want.shape)
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
        return
    w64 = want.astype(np.float64)
    if scale is None:
        scale = float(np.max(np.abs(w64), initial=0.0))
    bound = rtol * np.maximum(scale, np.abs(w64))
    diff = np.abs(got.astype(np.float64) - w64)
    same_nan = np.isnan(got) & np.isnan(want)
    bad = ~((diff <= bound) | same_nan)
    assert not bad.any(), (
        f"{err_msg}: {int(bad.sum())} of {bad.size} elements off by more than rtol {rtol:.3g} of "
        f"scale {scale:.3g}; worst {float(np.nanmax(np.where(bad, diff, 0))):.3g}"
    )


def lrn_float64(x, size: int, alpha=1e-4, beta=0.75, bias=1.0) -> np.ndarray:
    """ONNX's LRN definition in float64 (onnxruntime takes only odd sizes and 4-D inputs): the
    sum of squares over the channel window [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    x = np.asarray(x, np.float64)
    C = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.zeros_like(x)
    for c in range(C):
        sq[:, c] = (x[:, max(0, c - lo) : min(C, c + hi + 1)] ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


def reduction_terms(model) -> int:
    """An upper bound on the longest chain of rounded sums in an ONNX model (a path or a
    ModelProto), from an input to an output: the terms of every reduction in it added up (a
    Conv's C/group x kernel products, a MatMul's or Gemm's K, a pool's window, a softmax's
    axis, a normalization's few steps; 1 for any other op). Shapes come from ONNX's shape
    inference; an unknown size counts as 1000."""
    import onnx
    from onnx import numpy_helper, shape_inference

    if isinstance(model, (str, bytes)):
        model = onnx.load(model) if isinstance(model, str) else onnx.load_from_string(model)
    model = shape_inference.infer_shapes(model)
    g = model.graph
    shapes = {t.name: list(t.dims) for t in g.initializer}
    for v in [*g.input, *g.value_info, *g.output]:
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else 1000 for d in dims]
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}

    def attr(node, name, default):
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    total = 0
    for node in g.node:
        op, ins = node.op_type, [shapes.get(n, []) for n in node.input]
        if op in ("Conv", "ConvTranspose") and len(ins[1]) > 2:
            total += int(np.prod(ins[1][1:]))
        elif op == "MatMul":
            total += ins[0][-1] if ins[0] else 1000
        elif op == "Gemm":
            total += ins[0][0 if attr(node, "transA", 0) else -1] if ins[0] else 1000
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            total += int(np.prod(ins[0][2:])) if ins[0] else 1000
        elif op in ("AveragePool", "MaxPool", "LpPool"):
            total += int(np.prod(attr(node, "kernel_shape", [1])))
        elif op in ("Softmax", "LogSoftmax"):
            total += ins[0][attr(node, "axis", -1)] if ins[0] else 1000
        elif op in ("ReduceSum", "ReduceMean") and node.input[1:] and node.input[1] in consts:
            total += int(np.prod([ins[0][a] for a in consts[node.input[1]]]))
        else:
            total += 4  # an elementwise op or a normalization: a few roundings
    return total
