"""optimize_conv::fuse_batchnorm_conv, against onnxruntime on the unfolded graph."""

import numpy as np
import pytest

from .helpers import F32, check, model, node, op_types, optimized, rand

PASS = ["optimize_conv::fuse_batchnorm_conv"]
FEEDS = {"x": rand(2, 4, 5, 6, seed=9)}


def _bn_then_convs(convs, *, zero_shift=False, other_reader=None, bn_is_output=False):
    """x (n, 4, h, w) → BatchNormalization → each conv of ``convs`` ({attrs, out channels,
    group, bias}) reading the normalized value."""
    inits = {
        "s": rand(4, seed=1),
        "t": np.zeros(4, np.float32) if zero_shift else rand(4, seed=2),
        "m": np.zeros(4, np.float32) if zero_shift else rand(4, seed=3),
        "v": np.abs(rand(4, seed=4)) + 0.1,
    }
    nodes = [node("BatchNormalization", ["x", "s", "t", "m", "v"], ["n"], epsilon=1e-3)]
    outputs = {}
    for i, (out_ch, group, k, pads, bias) in enumerate(convs):
        inits[f"w{i}"] = rand(out_ch, 4 // group, k, k, seed=10 + i)
        ins = ["n", f"w{i}"]
        if bias:
            inits[f"b{i}"] = rand(out_ch, seed=20 + i)
            ins.append(f"b{i}")
        nodes.append(node("Conv", ins, [f"y{i}"], group=group, pads=[pads] * 4))
        outputs[f"y{i}"] = (F32, None)
    if other_reader:
        nodes.append(node(other_reader, ["n"], ["z"]))
        outputs["z"] = (F32, None)
    if bn_is_output:
        outputs["n"] = (F32, None)
    return model(nodes, {"x": (F32, ["n", 4, "h", "w"])}, outputs, inits)


@pytest.mark.parametrize(
    "convs, zero_shift",
    [
        ([(6, 1, 1, 0, True)], False),  # a pointwise conv after the norm
        ([(6, 1, 1, 0, False)], False),  # no bias of its own
        ([(6, 1, 1, 0, True), (4, 2, 1, 0, True)], False),  # two readers, one grouped
        ([(4, 4, 3, 0, True)], False),  # depthwise, no padding
        ([(4, 4, 3, 1, True), (6, 1, 1, 0, True)], True),  # padded: a zero shift folds
    ],
)
def test_batchnorm_folds_into_the_convs_after_it(convs, zero_shift):
    data = _bn_then_convs(convs, zero_shift=zero_shift)
    out = check(data, PASS, FEEDS, rtol=1e-4, atol=1e-5)
    assert op_types(out) == {"Conv": len(convs)}


@pytest.mark.parametrize(
    "convs, kw",
    [
        ([(4, 4, 3, 1, True)], {}),  # the padded border would read the shift as zeros
        ([(6, 1, 1, 0, True), (4, 4, 3, 1, True)], {}),  # one reader of two cannot take it
        ([(6, 1, 1, 0, True)], {"other_reader": "Relu"}),
        ([(6, 1, 1, 0, True)], {"bn_is_output": True}),
    ],
)
def test_batchnorm_stays_before_the_convs(convs, kw):
    data = _bn_then_convs(convs, **kw)
    original, out = optimized(data, PASS)
    assert op_types(out) == op_types(original)
    check(data, PASS, FEEDS, rtol=1e-4, atol=1e-5)
