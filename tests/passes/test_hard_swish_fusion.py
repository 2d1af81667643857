"""optimize_activation::fuse_hard_swish, against onnxruntime on the unfused graph."""

import numpy as np
import pytest

import offload
from offload.runtime.steps import _KernelPair, _PreparedStep

from .helpers import F32, check, model, node, onnxruntime_run, op_types, optimized, rand

PASS = ["optimize_activation::fuse_hard_swish"]
FEEDS = {"x": (rand(2, 4, 5, 6, seed=3) * 4).astype(np.float32)}  # both bends of the gate


def _hard_swish(shift=3.0, bounds=(0.0, 6.0), tail=("x", "sixth"), sixth_as_div=False, extra_reader=None):
    inits = {
        "three": np.array(shift, np.float32),
        "lo": np.array(bounds[0], np.float32),
        "hi": np.array(bounds[1], np.float32),
        "k": np.array(6.0 if sixth_as_div else 1 / 6, np.float32),
    }
    nodes = [node("Add", ["three", "x"], ["a"]), node("Clip", ["a", "lo", "hi"], ["c"])]
    prev = "c"
    for i, step in enumerate(tail):
        out = "y" if i == len(tail) - 1 else f"t{i}"
        if step == "x":
            nodes.append(node("Mul", ["x", prev], [out]))
        else:
            nodes.append(node("Div" if sixth_as_div else "Mul", [prev, "k"], [out]))
        prev = out
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Relu", [extra_reader], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, ["n", 4, "h", "w"])}, outputs, inits)


@pytest.mark.parametrize(
    "tail, sixth_as_div",
    [(("x", "sixth"), False), (("sixth", "x"), False), (("x", "sixth"), True), (("sixth", "x"), True)],
)
def test_hard_swish_fuses(tail, sixth_as_div):
    out = check(_hard_swish(tail=tail, sixth_as_div=sixth_as_div), PASS, FEEDS, rtol=1e-6, atol=1e-6)
    assert op_types(out) == {"HardSwish": 1}


@pytest.mark.parametrize(
    "kw",
    [
        {"shift": 2.0},
        {"bounds": (0.0, 5.0)},
        {"bounds": (-1.0, 6.0)},
        {"extra_reader": "c"},  # the gate is read elsewhere
        {"extra_reader": "t0"},
        {"tail": ("x",)},  # no division by 6
    ],
)
def test_hard_swish_does_not_fuse(kw):
    data = _hard_swish(**kw)
    original, out = optimized(data, PASS)
    assert op_types(out) == op_types(original)
    check(data, PASS, FEEDS)


def test_hard_swish_after_a_conv_runs_in_its_epilogue():
    """In the default pipeline the fused HardSwish after a Conv is paired with the conv by the
    CPU executor (the conv's prepared call applies it), and the module matches onnxruntime."""

    inits = {"w": rand(4, 4, 3, 3, seed=1), "three": np.array(3.0, np.float32)}
    inits.update(
        {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32), "six": np.array(6.0, np.float32)}
    )
    nodes = [
        node("Conv", ["x", "w"], ["v"], pads=[1, 1, 1, 1]),
        node("Add", ["v", "three"], ["a"]),
        node("Clip", ["a", "lo", "hi"], ["c"]),
        node("Mul", ["v", "c"], ["m"]),
        node("Div", ["m", "six"], ["y"]),
    ]
    data = model(nodes, {"x": (F32, ["n", 4, "h", "w"])}, {"y": (F32, None)}, inits)
    program = offload.optimize(offload.load(data))
    assert op_types(program) == {"Conv": 1, "HardSwish": 1}
    method = offload.runtime.load(offload.save(program)).method("forward")
    want = onnxruntime_run(data, FEEDS)["y"]
    for _ in range(2):  # the second run at these shapes runs the plan prepared for them
        got = method.run(FEEDS)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, offload.evaluate(program, FEEDS)["y"])
    plan = method._specializations.entries[(FEEDS["x"].shape,)]
    pairs = [
        s.kernel for s in plan.steps if isinstance(s, _PreparedStep) and isinstance(s.kernel, _KernelPair)
    ]
    assert [(p.first.op_name, p.second.op_name) for p in pairs] == [("onnx::Conv", "onnx::HardSwish")]


def _gate_times_x(alpha=1 / 6, beta=0.5, x_first=True, extra_reader=False):
    nodes = [
        node("HardSigmoid", ["x"], ["h"], alpha=alpha, beta=beta),
        node("Mul", ["x", "h"] if x_first else ["h", "x"], ["y"]),
    ]
    outputs = {"y": (F32, None)}
    if extra_reader:
        nodes.append(node("Relu", ["h"], ["z"]))
        outputs["z"] = (F32, None)
    return model(nodes, {"x": (F32, ["n", 4, "h", "w"])}, outputs)


@pytest.mark.parametrize("x_first", [True, False])
def test_hard_sigmoid_times_x_is_hard_swish_bit_for_bit(x_first):
    data = _gate_times_x(x_first=x_first)
    original, out = optimized(data, PASS)
    assert op_types(out) == {"HardSwish": 1}
    check(data, PASS, FEEDS, rtol=1e-6, atol=1e-7)
    want = offload.evaluate(original, FEEDS)["y"]
    np.testing.assert_array_equal(offload.evaluate(out, FEEDS)["y"], want)


@pytest.mark.parametrize("kw", [{"alpha": 0.2}, {"beta": 0.4}, {"extra_reader": True}])
def test_hard_sigmoid_times_x_stays(kw):
    original, out = optimized(_gate_times_x(**kw), PASS)
    assert op_types(out) == op_types(original)
