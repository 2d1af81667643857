"""optimize_normalization::fuse_layernorm_or_instancenorm."""

import numpy as np
import onnx
import pytest

import offload

from .helpers import F32, check, model, node, onnxruntime_run, op_types, optimized, rand

P = ["optimize_normalization::fuse_layernorm_or_instancenorm"]
I64 = np.int64


def _norm(shape, axes, gamma=None, beta=None, *, square="Pow", eps=1e-5, extra_reader=None, opset=21):
    nodes = [
        node("ReduceMean", ["x", "axes"], ["m"]),
        node("Sub", ["x", "m"], ["d"]),
        node("Pow", ["d", "two"], ["p"]) if square == "Pow" else node("Mul", ["d", "d"], ["p"]),
        node("ReduceMean", ["p", "axes"], ["v"]),
        node("Add", ["v", "eps"], ["e"]),
        node("Sqrt", ["e"], ["s"]),
        node("Div", ["d", "s"], ["n" if gamma is not None or beta is not None else "y"]),
    ]
    inits = {"axes": np.array(axes, I64), "two": np.array(2.0, np.float32), "eps": np.array(eps, np.float32)}
    last = "n"
    if gamma is not None:
        out = "g" if beta is not None else "y"
        nodes.append(node("Mul", ["gamma", last], [out]))
        inits["gamma"] = gamma
        last = out
    if beta is not None:
        nodes.append(node("Add", [last, "beta"], ["y"]))
        inits["beta"] = beta
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Neg", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, list(shape))}, outputs, inits, opset=opset)


@pytest.mark.parametrize(
    "shape, axes, gamma, beta, square",
    [
        ((2, 5, 8), [-1], rand(8, seed=1), rand(8, seed=2), "Pow"),
        ((2, 5, 8), [2], rand(1, 1, 8, seed=1), None, "Mul"),
        ((2, 5, 8), [1, 2], rand(5, 8, seed=1), rand(1, 8, seed=2), "Pow"),
        ((2, 5, 8), [-1], None, None, "Pow"),
        ((4, 6), [1], None, rand(6, seed=2), "Mul"),
    ],
)
def test_layernorm_fuses(shape, axes, gamma, beta, square):
    out = check(
        _norm(shape, axes, gamma, beta, square=square),
        P,
        {"x": rand(*shape, seed=3) * 2 + 1},
        rtol=1e-5,
        atol=1e-5,
    )
    assert op_types(out) == {"LayerNormalization": 1}


@pytest.mark.parametrize(
    "shape, gamma, beta",
    [
        ((2, 3, 4, 5), rand(3, 1, 1, seed=1), rand(1, 3, 1, 1, seed=2)),
        ((2, 3, 7), rand(3, 1, seed=1), rand(3, 1, seed=2)),
        ((2, 3, 4, 5), None, None),
    ],
)
def test_instancenorm_fuses(shape, gamma, beta):
    axes = list(range(2, len(shape)))
    out = check(_norm(shape, axes, gamma, beta), P, {"x": rand(*shape, seed=3) * 2 + 1}, rtol=1e-5, atol=1e-5)
    want = "LayerNormalization" if gamma is None and beta is None else "InstanceNormalization"
    assert op_types(out) == {want: 1}


@pytest.mark.parametrize(
    "shape, axes, gamma, kw",
    [
        ((2, 5, 8), [1], rand(8, seed=1), {}),  # axes are not trailing, not spatial
        ((2, 5, 8), [-1], rand(2, 1, 1, seed=1), {}),  # gamma varies along the batch
        ((2, 5, 8), [-1], rand(8, seed=1), {"extra_reader": "d"}),
        ((2, 5, 8), [-1], rand(8, seed=1), {"extra_reader": "v"}),
        ((2, 5, 8), [-1], rand(3, 2, 5, 8, seed=1), {}),  # gamma broadcasts to a larger shape
    ],
)
def test_normalization_does_not_fire(shape, axes, gamma, kw):
    original, out = optimized(_norm(shape, axes, gamma, **kw), P)
    assert op_types(out) == op_types(original)


def test_eps_that_is_not_one_number_stays():
    eps = np.array([[[1e-5]], [[1e-3]]], np.float32)  # one value per batch row
    m = onnx.load_from_string(_norm((2, 5, 8), [-1]))
    for init in m.graph.initializer:
        if init.name == "eps":
            init.CopyFrom(onnx.numpy_helper.from_array(eps, "eps"))
    data = m.SerializeToString()
    original, out = optimized(data, P)
    assert op_types(out) == op_types(original)
    x = rand(2, 5, 8, seed=3)
    np.testing.assert_allclose(
        offload.evaluate(out, {"x": x})["y"], onnxruntime_run(data, {"x": x})["y"], rtol=1e-5, atol=1e-5
    )


def _from_reshape(data: bytes) -> bytes:
    """The same pattern reading x = Reshape(flat, shape) + bias(8) of a shape that is an input:
    x's rank is known (3, the shape's length) and only its last dim (the bias's), as after an
    exporter's computed Reshape."""
    m = onnx.load_from_string(data)
    m.graph.node.insert(0, node("Reshape", ["flat", "shape"], ["r"]))
    m.graph.node.insert(1, node("Add", ["r", "xb"], ["x"]))
    m.graph.initializer.append(onnx.numpy_helper.from_array(rand(8, seed=4), "xb"))
    del m.graph.input[:]
    m.graph.input.extend(
        [
            onnx.helper.make_tensor_value_info("flat", F32, ["n"]),
            onnx.helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [3]),
        ]
    )
    return m.SerializeToString()


@pytest.mark.parametrize("dims", ["symbols", "unknown"])
def test_layernorm_fuses_with_leading_dims_not_static(dims):
    data = _norm(("batch", "seq", 8), [-1], rand(8, seed=1), rand(8, seed=2))
    if dims == "unknown":
        data = _from_reshape(data)
    _, out = optimized(data, P)
    assert op_types(out)["LayerNormalization"] == 1 and op_types(out)["ReduceMean"] == 0
    for shape in ((2, 5, 8), (1, 3, 8)):
        x = rand(*shape, seed=3) * 2 + 1
        feeds = {"x": x} if dims == "symbols" else {"flat": x.reshape(-1), "shape": np.array(shape, I64)}
        np.testing.assert_allclose(
            offload.evaluate(out, feeds)["y"], onnxruntime_run(data, feeds)["y"], rtol=1e-5, atol=1e-5
        )


def test_normalization_with_a_symbolic_normalized_dim_stays():
    original, out = optimized(_norm((2, 5, "d"), [-1], None, None), P)
    assert op_types(out) == op_types(original)


def test_eps_of_a_higher_rank_stays():
    # onnxruntime's own LayerNorm fusion drops the broadcast here, so numpy in float64 is the reference
    gamma, eps = rand(8, seed=1), np.full((1, 1, 1, 1), 1e-5, np.float32)
    m = onnx.load_from_string(_norm(("batch", "seq", 8), [-1], gamma))
    for init in m.graph.initializer:
        if init.name == "eps":
            init.CopyFrom(onnx.numpy_helper.from_array(eps, "eps"))
    original, out = optimized(m.SerializeToString(), P)
    assert op_types(out) == op_types(original)
    x = rand(2, 5, 8, seed=3)
    d = x.astype(np.float64) - x.mean(-1, keepdims=True, dtype=np.float64)
    want = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps.astype(np.float64)) * gamma
    got = offload.evaluate(out, {"x": x})["y"]
    assert got.shape == want.shape == (1, 2, 5, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
