"""MaxPool and AveragePool as prepared calls (runtime/kernels/pool.py, _PoolCall): a MaxPool whose
Indices output is omitted and any 2-D float AveragePool of static shapes run their numpy calls
straight into the arena, bound once per arena set; values against onnxruntime, and bit for bit
against the kernel (offload.evaluate); a MaxPool whose Indices are wanted stays a kernel step."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.steps import _BoundRun, _KernelStep, _PreparedStep

from .onnx_graphs import model_bytes

F32, I64 = TensorProto.FLOAT, TensorProto.INT64

GEOMETRIES = [
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 3], dilations=[2, 2], pads=[1, 0, 0, 2]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[7, 7], strides=[1, 1]),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1], dilations=[2, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
    # the stem pool (pool._stem) on even maps: no padding buffer, first rows and columns folded again
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]),
]


def _pool_model(op: str, attrs: dict, shape, wanted_indices=False) -> bytes:
    outputs = [("y", F32, None)] + ([("i", I64, None)] if wanted_indices else [])
    # a Relu before the pool: its input is a prepared step's result, so the pool's call is bound
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(op, ["r"], [n for n, _, _ in outputs], **attrs),
    ]
    return model_bytes(nodes, [("x", F32, list(shape))], outputs, opset=19)


def _method(data: bytes):
    return offload.runtime.load(offload.save(offload.load(data))).method("forward")


def _pool_step(method):
    (step,) = [s for s in method._steps if "Pool" in s.info().name]
    return step


# heights and widths odd and even: without padding, a size that is not a multiple of the stride
# is folded by views per channel or row (pool._pool_calls); both even for the stem pool
@pytest.mark.parametrize(
    "shape", [(2, 5, 13, 12), (1, 3, 10, 11), (2, 3, 12, 14)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("attrs", GEOMETRIES, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePool-include-pad"])
def test_a_pool_is_a_prepared_call_and_matches_onnxruntime_and_the_kernel(op, attrs, shape):
    attrs = dict(attrs)
    if op == "AveragePool-include-pad":
        op, attrs["count_include_pad"] = "AveragePool", 1
    data = _pool_model(op, attrs, shape)
    method = _method(data)
    assert isinstance(_pool_step(method), _PreparedStep)
    assert any(isinstance(s, _BoundRun) for s in method._fast_steps)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    program = offload.load(data)
    rng = np.random.default_rng(0)
    for _ in range(2):  # the second run reuses the bound calls
        x = rng.standard_normal(shape).astype(np.float32)
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])


def test_a_max_pool_whose_indices_are_wanted_stays_a_kernel_step():
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    shape = (1, 4, 9, 9)
    data = _pool_model("MaxPool", attrs, shape, wanted_indices=True)
    method = _method(data)
    assert type(_pool_step(method)) is _KernelStep
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got = method.run({"x": x})
    want_y, want_i = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got["y"], want_y)
    np.testing.assert_array_equal(got["i"], want_i)


def test_a_pool_of_a_symbolic_shape_is_prepared_by_the_shape_specialization():
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    data = model_bytes(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["m"], **attrs),
            helper.make_node("AveragePool", ["m"], ["y"], **attrs),
        ],
        [("x", F32, ["n", 3, "h", "w"])],
        [("y", F32, None)],
    )
    method = _method(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    for shape in [(1, 3, 17, 12), (1, 3, 17, 12), (2, 3, 8, 9), (2, 3, 8, 9), (1, 3, 17, 12)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(
            method.run({"x": x})["y"], session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6
        )
    plan = method._specializations.entries[((1, 3, 17, 12),)]
    prepared = [s.kernel.op_name for s in plan.steps if isinstance(s, _PreparedStep)]
    assert prepared == ["onnx::Relu", "onnx::MaxPool", "onnx::AveragePool"]


@pytest.mark.parametrize("shape", [(1, 2, 1, 1), (1, 2, 2, 3), (2, 3, 4, 5), (1, 4, 9, 7)], ids=str)
@pytest.mark.parametrize("kernel", [(3, 3), (5, 5), (3, 5), (1, 3)], ids=str)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_same_size_pool_on_small_maps_matches_onnxruntime(op, kernel, shape):
    # stride 1 and (k - 1) / 2 padding: folded flat over all channels, the edges again
    # (pool._same_size_pool_calls); maps smaller than the kernel have edges only
    pads = [kernel[0] // 2, kernel[1] // 2] * 2
    data = _pool_model(op, dict(kernel_shape=list(kernel), pads=pads), shape)
    method = _method(data)
    assert isinstance(_pool_step(method), _PreparedStep)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(method.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])),
        ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], count_include_pad=1)),
        ("Conv", dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1])),  # depthwise: by stride phases
    ],
    ids=["MaxPool", "AveragePool", "depthwise-Conv"],
)
def test_sizes_whose_padded_buffers_round_alike_keep_their_own_padding(op, attrs):
    # Padding buffers are shared by the ops of one geometry on a thread (buffers._Buffers); at stride 2
    # a 12- and a 13-row map round up to the same 14 padded rows, and the 13-row map writes its
    # last row where the 12-row one reads padding: the buffer is keyed by the map's size too.
    w = np.random.default_rng(4).standard_normal((4, 1, 3, 3)).astype(np.float32)
    inits = [("w", w)] if op == "Conv" else []
    node = helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["y"], **attrs)
    data = model_bytes([node], [("x", F32, [1, 4, "h", "w"])], [("y", F32, None)], inits)
    program = offload.load(data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for size in (12, 13, 12, 11, 12):
        x = (rng.standard_normal((1, 4, size, size)) + 3).astype(np.float32)  # padding reads 0 or -inf
        want = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(offload.evaluate(program, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)
