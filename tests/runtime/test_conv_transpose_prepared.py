"""ConvTranspose as a prepared call where its windows do not overlap (runtime/kernels/
conv_transpose_prepared.py; the spread by spread_loops.py or by numpy): against onnxruntime, bit
for bit against the kernel (offload.evaluate), and the forms the kernel keeps."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from offload.runtime.kernels import _util
from offload.runtime.kernels.conv_transpose_prepared import _ConvTransposeCall
from offload.runtime.steps import _PreparedStep

from .harness import checked_method
from .onnx_graphs import model_bytes


def _model(x_shape, m: int, kernel: int, strides: int, bias: bool, **attrs) -> bytes:
    """x -> Neg -> ConvTranspose (weights (C, m, kernel, kernel)) -> y."""
    c = x_shape[1]
    rng = np.random.default_rng(c * m + kernel)
    inits = [("w", (rng.standard_normal((c, m, kernel, kernel)) * 0.3).astype(np.float32))]
    if bias:
        inits.append(("b", rng.standard_normal(m).astype(np.float32)))
    nodes = [
        helper.make_node("Neg", ["x"], ["r"]),
        helper.make_node(
            "ConvTranspose", ["r", "w", *(["b"] if bias else [])], ["y"], strides=[strides] * 2, **attrs
        ),
    ]
    return model_bytes(
        nodes, [("x", TensorProto.FLOAT, list(x_shape))], [("y", TensorProto.FLOAT, None)], inits, 17
    )


def _run(data: bytes, x_shape) -> object:
    """The method of ``data`` after runs that match onnxruntime and the kernel."""
    feeds = [{"x": np.random.default_rng(s).standard_normal(x_shape).astype(np.float32)} for s in (1, 2)]
    return checked_method(data, feeds, rtol=1e-5, atol=1e-5)


def _prepared(method) -> list:
    return [
        s for s in method._steps if isinstance(s, _PreparedStep) and isinstance(s.call, _ConvTransposeCall)
    ]


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
@pytest.mark.parametrize(
    "x_shape,m,kernel,bias",
    [((1, 16, 9, 7), 12, 2, True), ((1, 5, 4, 6), 3, 3, False), ((1, 8, 3, 5), 4, 1, True)],
)
def test_windows_that_do_not_overlap_run_prepared(x_shape, m, kernel, bias, loops, monkeypatch):
    if loops == "compiled" and _util.compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    if loops == "numpy":
        monkeypatch.setattr(_util, "_LOOPS", False)
    method = _run(_model(x_shape, m, kernel, kernel, bias), x_shape)
    assert len(_prepared(method)) == 1


@pytest.mark.parametrize(
    "x_shape,kernel,strides,attrs",
    [
        ((1, 6, 5, 5), 3, 2, {}),  # windows overlap
        ((2, 6, 5, 5), 2, 2, {}),  # two images
        ((1, 6, 5, 5), 2, 2, {"pads": [1, 1, 0, 0]}),
        ((1, 6, 5, 5), 2, 2, {"output_padding": [1, 1]}),
        ((1, 6, 5, 5), 2, 2, {"dilations": [2, 2]}),
    ],
)
def test_other_forms_stay_with_the_kernel(x_shape, kernel, strides, attrs):
    method = _run(_model(x_shape, 4, kernel, strides, True, **attrs), x_shape)
    assert not _prepared(method)
