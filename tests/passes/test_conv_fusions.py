"""optimize_conv::fuse_conv_{batchnorm,bias,scale} and fuse_pad_conv."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

I64 = np.int64
X = {"x": rand(1, 3, 6, 6, seed=7)}


def _conv_then(op, c, *, conv_bias=True, other_reader=False, const_first=False, w_input=False, dims=None):
    inits = {"w": rand(4, 3, 3, 3), "c": c}
    conv_in = ["x", "w"]
    if conv_bias:
        inits["b"] = rand(4, seed=1)
        conv_in.append("b")
    inputs = {"x": (F32, dims or [1, 3, 6, 6])}
    if w_input:
        del inits["w"]
        inputs["w"] = (F32, [4, 3, 3, 3])
    nodes = [
        node("Conv", conv_in, ["conv"], pads=[1, 1, 1, 1]),
        node(op, ["c", "conv"] if const_first else ["conv", "c"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Relu", ["conv"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize(
    "op, c, conv_bias, const_first",
    [
        ("Add", rand(4, 1, 1, seed=2), True, False),
        ("Add", rand(1, 4, 1, 1, seed=2), False, True),
        ("Sub", np.array(0.5, np.float32), True, False),
    ],
)
def test_bias_folds_into_the_conv(op, c, conv_bias, const_first):
    data = _conv_then(op, c, conv_bias=conv_bias, const_first=const_first)
    out = check(data, ["optimize_conv::fuse_conv_bias"], X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Conv": 1}


@pytest.mark.parametrize(
    "op, c, conv_bias, const_first",
    [
        ("Mul", rand(4, 1, 1, seed=2), True, False),
        ("Mul", np.array(3.0, np.float32), False, True),
        ("Div", np.abs(rand(1, 4, 1, 1, seed=3)) + 0.5, True, False),
    ],
)
def test_scale_folds_into_the_conv(op, c, conv_bias, const_first):
    data = _conv_then(op, c, conv_bias=conv_bias, const_first=const_first)
    out = check(data, ["optimize_conv::fuse_conv_scale"], X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Conv": 1}


SYMBOLIC = ["n", 3, "h", "w"]  # the conv's output then has unknown height and width


@pytest.mark.parametrize(
    "pass_, op, c",
    [
        ("fuse_conv_scale", "Mul", rand(4, 1, 1, seed=2)),
        ("fuse_conv_bias", "Add", rand(1, 4, 1, 1, seed=2)),
        ("fuse_conv_bias", "Add", np.array(3.0, np.float32)),
    ],
)
def test_per_channel_constant_folds_with_unknown_dims(pass_, op, c):
    data = _conv_then(op, c, dims=SYMBOLIC)
    out = check(data, [f"optimize_conv::{pass_}"], X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Conv": 1}
    assert out.main.body.operations[-1].outputs[0].type.shape[2] is None


@pytest.mark.parametrize(
    "pass_, op, c",
    [
        ("fuse_conv_bias", "Add", rand(2, 4, 1, 1, seed=2)),  # broadcast grows the batch
        ("fuse_conv_bias", "Add", rand(1, 1, 4, 1, 1, seed=2)),  # broadcast adds a dim
        ("fuse_conv_scale", "Mul", rand(4, 1, 6, seed=2)),  # varies over width
    ],
)
def test_per_channel_fusion_with_unknown_dims_does_not_fire(pass_, op, c):
    original, out = optimized(_conv_then(op, c, dims=SYMBOLIC), [f"optimize_conv::{pass_}"])
    assert op_types(out) == op_types(original)


@pytest.mark.parametrize(
    "pass_, op, c, kw",
    [
        ("fuse_conv_bias", "Add", rand(4, 1, 1, seed=2), {"other_reader": True}),
        ("fuse_conv_bias", "Add", rand(4, 6, 6, seed=2), {}),  # varies over space, not channels
        ("fuse_conv_bias", "Add", rand(2, 4, 1, 1, seed=2), {}),  # broadcast grows the batch
        ("fuse_conv_bias", "Sub", rand(4, 1, 1, seed=2), {"const_first": True}),
        ("fuse_conv_bias", "Add", rand(4, 1, 1, seed=2), {"w_input": True}),  # weights not constant
        ("fuse_conv_scale", "Mul", rand(4, 1, 1, seed=2), {"other_reader": True}),
        ("fuse_conv_scale", "Div", rand(4, 1, 1, seed=2), {"const_first": True}),
        ("fuse_conv_scale", "Div", np.array([1, 0, 1, 1], np.float32).reshape(4, 1, 1), {}),
    ],
)
def test_conv_fusion_does_not_fire(pass_, op, c, kw):
    data = _conv_then(op, c, **kw)
    original, out = optimized(data, [f"optimize_conv::{pass_}"])
    assert op_types(out) == op_types(original)


def _conv_bn(
    training_outputs=False, other_reader=False, stat_input=False, conv_bias=True, dims=None, group=1
):
    inits = {
        "w": rand(4, 3 if group == 1 else 1, 3, 3),
        "s": rand(4, seed=1),
        "t": rand(4, seed=2),
        "m": rand(4, seed=3),
        "v": np.abs(rand(4, seed=4)) + 0.1,
    }
    conv_in = ["x", "w"]
    if conv_bias:
        inits["b"] = rand(4, seed=5)
        conv_in.append("b")
    inputs = {"x": (F32, dims or [1, 3, 6, 6])}
    if stat_input:
        del inits["m"]
        inputs["m"] = (F32, [4])
    nodes = [
        node("Conv", conv_in, ["conv"], strides=[2, 2], group=group),
        node("BatchNormalization", ["conv", "s", "t", "m", "v"], ["y"], epsilon=1e-3),
    ]
    outputs = {"y": (F32, None)}
    if other_reader:
        nodes.append(node("Relu", ["conv"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("conv_bias", [True, False])
def test_batchnorm_folds_into_the_conv(conv_bias):
    out = check(
        _conv_bn(conv_bias=conv_bias), ["optimize_conv::fuse_conv_batchnorm"], X, rtol=1e-4, atol=1e-5
    )
    assert op_types(out) == {"Conv": 1}


@pytest.mark.parametrize("conv_bias", [True, False])
def test_batchnorm_folds_with_unknown_dims(conv_bias):
    """A batch and image size left open (as PaddleOCR exports are) leave the conv's output
    height and width unknown; BatchNormalization keeps that shape, so it still folds."""
    data = _conv_bn(conv_bias=conv_bias, dims=SYMBOLIC)
    out = check(data, ["optimize_conv::fuse_conv_batchnorm"], X, rtol=1e-4, atol=1e-5)
    assert op_types(out) == {"Conv": 1}


def test_batchnorm_folds_into_a_depthwise_conv():
    data = _conv_bn(conv_bias=False, dims=[1, 4, "h", "w"], group=4)
    feeds = {"x": rand(1, 4, 7, 5, seed=8)}
    out = check(data, ["optimize_conv::fuse_conv_batchnorm"], feeds, rtol=1e-4, atol=1e-5)
    assert op_types(out) == {"Conv": 1}


@pytest.mark.parametrize("kw", [{"other_reader": True}, {"stat_input": True}])
def test_batchnorm_stays(kw):
    feeds = dict(X)
    if kw.get("stat_input"):
        feeds["m"] = rand(4, seed=3)
    out = check(_conv_bn(**kw), ["optimize_conv::fuse_conv_batchnorm"], feeds, rtol=1e-4, atol=1e-5)
    assert op_types(out)["BatchNormalization"] == 1


def _pad_conv(pads, mode="constant", value=None, conv_pads=(1, 0, 1, 0)):
    inits = {"p": np.array(pads, I64), "w": rand(4, 3, 3, 3)}
    pad_in = ["x", "p"]
    if value is not None:
        inits["v"] = np.array(value, np.float32)
        pad_in.append("v")
    return model(
        [node("Pad", pad_in, ["pad"], mode=mode), node("Conv", ["pad", "w"], ["y"], pads=list(conv_pads))],
        {"x": (F32, [1, 3, 6, 6])},
        {"y": (F32, None)},
        inits,
    )


def test_zero_pad_melds_into_the_conv():
    out = check(
        _pad_conv([0, 0, 1, 2, 0, 0, 0, 1]), ["optimize_conv::fuse_pad_conv"], X, rtol=1e-5, atol=1e-5
    )
    assert op_types(out) == {"Conv": 1}
    assert out.main.body.operations[0].attributes["pads"] == [2, 2, 1, 1]


@pytest.mark.parametrize(
    "pads, mode, value",
    [
        ([0, 0, 1, 1, 0, 0, 1, 1], "reflect", None),
        ([0, 0, 1, 1, 0, 0, 1, 1], "constant", 1.0),
    ],
)
def test_pad_that_is_not_a_zero_spatial_pad_stays(pads, mode, value):
    data = _pad_conv(pads, mode, value)
    out = check(data, ["optimize_conv::fuse_pad_conv"], X, rtol=1e-5, atol=1e-5)
    assert op_types(out) == {"Pad": 1, "Conv": 1}
