"""Value ranges by interval arithmetic (``offload.ir.ranges``) and seen on samples (``offload.calibrate``).

Soundness is checked against onnxruntime: each model's inputs are drawn within the given input
ranges (their endpoints included, and the corners that reach a linear op's extremes), every
intermediate is made a graph output, and each value onnxruntime computes must lie within the
bounds offload proved for it. Tightness is checked where the bound is attained: the input that
reaches it is constructed and onnxruntime must reach the bound.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.ir import ranges
from offload.ir.types import ValueRange

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=21) -> bytes:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(
        nodes, "g", vi, out, [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _every_value_an_output(data: bytes) -> bytes:
    m = onnx.load_from_string(data)
    names = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for o in node.output:
            if o and o not in names:
                m.graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, None))
    return m.SerializeToString()


def _bounds(program) -> dict[str, ValueRange]:
    return {
        v.name: v.type.range
        for op in program.main.body.walk()
        for v in op.outputs
        if v is not None and getattr(v.type, "range", None) is not None
    }


def _samples(shape, lo, hi, n=24):
    """Uniform draws in [lo, hi], plus all-lo, all-hi and random corners."""
    out = [np.full(shape, lo, np.float32), np.full(shape, hi, np.float32)]
    for _ in range(n // 2):
        out.append(RNG.uniform(lo, hi, shape).astype(np.float32))
        out.append(np.where(RNG.random(shape) < 0.5, lo, hi).astype(np.float32))
    return out


def check_sound(data: bytes, inputs: dict[str, tuple], shapes: dict[str, list]) -> dict[str, ValueRange]:
    """Every value onnxruntime computes on inputs within ``inputs``' ranges lies in offload's bounds."""
    program = offload.load(data)
    ranges.annotate(program, inputs)
    found = _bounds(program)
    session = ort.InferenceSession(_every_value_an_output(data), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    draws = {k: _samples(shapes[k], *inputs[k]) for k in inputs}
    for j in range(len(next(iter(draws.values())))):
        feeds = {k: v[j] for k, v in draws.items()}
        for name, value in zip(names, session.run(names, feeds)):
            r = found.get(name)
            if r is None or value.dtype.kind != "f":
                continue
            slack = 1e-5 * max(1.0, abs(r.lo), abs(r.hi))
            assert value.min() >= r.lo - slack and value.max() <= r.hi + slack, (
                name,
                r,
                value.min(),
                value.max(),
            )
    return found


UNARY = [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Erf", {}), ("Exp", {}), ("Abs", {}), ("Neg", {}),
    ("Softplus", {}), ("Softsign", {}), ("Gelu", {}), ("Mish", {}), ("HardSwish", {}), ("Sin", {}),
    ("Cos", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.5}), ("Selu", {}),
    ("HardSigmoid", {}), ("Floor", {}), ("Round", {}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Softmax", {"axis": -1}), ("LogSoftmax", {"axis": -1}), ("Celu", {}), ("Atan", {}),
    ("Shrink", {"bias": 0.5, "lambd": 1.0}),
]  # fmt: skip


@pytest.mark.parametrize("op,attrs", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("lo,hi", [(-3.0, 2.0), (0.5, 4.0), (-6.0, -1.0)])
def test_unary_bounds_hold(op, attrs, lo, hi):
    data = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [4, 8])], ["y"])
    found = check_sound(data, {"x": (lo, hi)}, {"x": [4, 8]})
    assert math.isfinite(found["y"].lo) and math.isfinite(found["y"].hi)


def test_monotonic_bounds_are_attained():
    data = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [("x", [2])], ["y"])
    program = offload.load(data)
    ranges.annotate(program, {"x": (-1.0, 3.0)})
    (y,) = program.main.outputs
    want = ort.InferenceSession(data).run(None, {"x": np.array([-1, 3], np.float32)})[0]
    np.testing.assert_allclose([y.type.range.lo, y.type.range.hi], want, rtol=1e-6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"])
def test_binary_bounds_hold(op):
    nodes = [helper.make_node(op, ["a", "b"], ["y"])]
    lo_b = 0.5 if op in ("Div", "Pow") else -2.0
    if op == "Pow":
        nodes = [helper.make_node("Pow", ["a", "two"], ["y"])]
        data = _model(nodes, [("a", [3, 4])], ["y"], [("two", np.float32(2))])
        check_sound(data, {"a": (-3.0, 2.0)}, {"a": [3, 4]})
        return
    data = _model(nodes, [("a", [3, 4]), ("b", [3, 4])], ["y"])
    check_sound(data, {"a": (-3.0, 2.0), "b": (lo_b, 4.0)}, {"a": [3, 4], "b": [3, 4]})


def test_a_divisor_range_holding_zero_is_unbounded():
    data = _model([helper.make_node("Div", ["a", "b"], ["y"])], [("a", [2]), ("b", [2])], ["y"])
    program = offload.load(data)
    ranges.annotate(program, {"a": (1.0, 2.0), "b": (-1.0, 1.0)})
    assert not math.isfinite(program.main.outputs[0].type.range.magnitude)


def test_conv_bounds_hold_and_are_attained_by_the_sign_pattern_of_a_filter():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    data = _model([conv], [("x", [1, 3, 6, 6])], ["y"], [("w", w), ("b", b)])
    found = check_sound(data, {"x": (-1.0, 1.0)}, {"x": [1, 3, 6, 6]})
    # the centre output of channel k reaches Σ|w_k| + b_k when x = sign(w_k) under the window
    k = int(np.argmax(np.abs(w).sum(axis=(1, 2, 3)) + b))
    x = np.zeros((1, 3, 6, 6), np.float32)
    x[0, :, 1:4, 1:4] = np.sign(w[k])
    y = ort.InferenceSession(data).run(None, {"x": x})[0]
    np.testing.assert_allclose(y[0, k, 2, 2], found["y"].hi, rtol=1e-5)


def test_a_network_of_linear_ops_norms_and_activations_stays_within_its_bounds():
    c = 4
    inits = [
        ("w1", RNG.standard_normal((c, 3, 3, 3)) * 0.5),
        ("g", RNG.uniform(0.5, 2, c)), ("beta", RNG.standard_normal(c)),
        ("mean", RNG.standard_normal(c)), ("var", RNG.uniform(0.1, 5e5, c)),
        ("w2", RNG.standard_normal((c * 4 * 4, 5))), ("b2", RNG.standard_normal(5)),
        ("lg", RNG.uniform(0.5, 1.5, 5)), ("lb", RNG.standard_normal(5)),
        ("shape", np.array([1, -1], np.int64)),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["mp", "shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w2", "b2"], ["fc"]),
        helper.make_node("LayerNormalization", ["fc", "lg", "lb"], ["ln"]),
        helper.make_node("Tanh", ["ln"], ["t"]),
        helper.make_node("Softmax", ["fc"], ["p"]),
        helper.make_node("Add", ["t", "p"], ["y"]),
    ]
    arrays = [(n, np.asarray(a, np.int64 if n == "shape" else np.float32)) for n, a in inits]
    vi = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", vi, out, [numpy_helper.from_array(a, n) for n, a in arrays])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    found = check_sound(data, {"x": (-2.0, 2.0)}, {"x": [1, 3, 16, 16]})
    assert found["ln"].magnitude < 20  # a normalization resets the bounds
    assert (found["p"].lo, found["p"].hi) == (0.0, 1.0)


def test_an_unknown_input_range_propagates_as_unbounded_and_bounded_ops_reset_it():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["s"])]
    program = offload.load(_model(nodes, [("x", [3])], ["s"]))
    ranges.annotate(program)
    found = _bounds(program)
    assert found["r"].lo == 0 and found["r"].hi == math.inf
    assert (found["s"].lo, found["s"].hi) == (0.5, 1.0)


def test_calibrate_records_the_extremes_seen_and_proves_the_rest():
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    program = offload.load(_model(nodes, [("x", [4])], ["y"], [("k", np.float32(3))]))
    samples = [{"x": np.array([-1, 0, 2, 1], np.float32)}, {"x": np.array([0, 5, -4, 1], np.float32)}]
    cal = offload.calibrate(program, samples)
    found = _bounds(cal)
    assert (found["m"].lo, found["m"].hi, found["m"].observed) == (-12.0, 15.0, True)
    assert (found["y"].lo, found["y"].hi) == (0.0, 15.0)
    assert program.main.outputs[0].type.range is None  # the input program is left alone
    given = offload.calibrate(program, input_ranges={"x": (-1.0, 1.0)})
    assert (_bounds(given)["m"].lo, _bounds(given)["m"].hi, _bounds(given)["m"].observed) == (
        -3.0,
        3.0,
        False,
    )


def test_calibrate_refuses_a_sample_that_is_not_a_dict():
    program = offload.load(_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], ["y"]))
    with pytest.raises(offload.errors.OffloadError, match="sample 1 is a ndarray"):
        offload.calibrate(program, [np.zeros(2, np.float32)])
