"""An activation's QuantizeLinear → DequantizeLinear pair as one step of the CPU executor
(runtime/quantize_pairs.py, kernels/quantize_pair.py): onnxruntime's floats, graph as written,
with ties rounded to even and saturation at both ends, by the compiled pass and by the numpy
passes; the fused step is the one taken, and the pairs it must leave alone stay two steps."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import offload
from offload.runtime.kernels.quantization import _DequantizeCall, _QuantizeCall
from offload.runtime.kernels.quantize_pair import QuantizePairCall
from offload.runtime.steps import _FusedAway, _PreparedStep

# (type, zero point, the second zero point); uint8 with 128 on both ops of a pair: the graph passes
# make the pair int8 without zero points (nullify_redundant_quantization_zero_point)
_EIGHT = {
    "int8": (np.int8, -3, -4),
    "uint8": (np.uint8, 131, 133),
    "uint8-128": (np.uint8, 128, 128),
}


def _chain(qtype: str, batch="N") -> bytes:
    """x → Add 0 → Q/DQ → Conv 3 x 3 → Q/DQ → MatMul → Q/DQ (another scale) → y. The weights are
    small integers and the scales powers of two, so every float is exact in any summing order
    and x / s lands on halves (the ties) where the data is a multiple of s / 2."""
    dtype, zp, zp2 = _EIGHT[qtype]
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(np.zeros((), np.float32), "o"),
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(0.25, np.float32), "s2"),
        numpy_helper.from_array(np.array(zp, dtype), "zp"),
        numpy_helper.from_array(np.array(zp2, dtype), "zp2"),
        numpy_helper.from_array(rng.integers(-2, 3, (4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.integers(-2, 3, (7, 5)).astype(np.float32), "m"),
    ]

    def pair(x, y, s="s", z="zp", s_out=None, z_out=None):
        return [
            helper.make_node("QuantizeLinear", [x, s, z], [f"{y}_q"]),
            helper.make_node("DequantizeLinear", [f"{y}_q", s_out or s, z_out or z], [y]),
        ]

    nodes = [
        helper.make_node("Add", ["x", "o"], ["a"]),
        *pair("a", "a_dq"),
        helper.make_node("Conv", ["a_dq", "w"], ["c"], pads=[1, 1, 1, 1]),
        *pair("c", "c_dq", s_out="s2", z_out="zp2"),  # the two ops' own scales and zero points
        helper.make_node("MatMul", ["c_dq", "m"], ["p"]),
        *pair("p", "y", s="s2", z="zp2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 6, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 6, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


def _as_written(data: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def _input(batch: int = 2) -> np.ndarray:
    """Multiples of 0.25 (halves of the first scale: ties), and beyond both ends of 8 bits."""
    rng = np.random.default_rng(4)
    x = (rng.integers(-200, 200, (batch, 3, 6, 7)) * 0.25).astype(np.float32)
    x[0, 0, 0, :4] = [1e6, -1e6, 200.0, -200.0]
    return x


def _steps(module, specialized: bool) -> list:
    method = module.method("forward")
    if not specialized:
        return method._steps
    (spec,) = [e for e in method._specializations.entries.values() if not isinstance(e, dict | None)]
    return spec.steps


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
@pytest.mark.parametrize("qtype", list(_EIGHT))
@pytest.mark.parametrize("passes", ["as written", "optimized"])
def test_pairs_are_one_step_with_onnxruntime_floats(qtype, loops, passes, monkeypatch):
    from offload.runtime.kernels import quantization, quantize_pair

    if loops == "numpy":
        monkeypatch.setattr(quantization, "compiled_loops", lambda: None)
        monkeypatch.setattr(quantize_pair, "compiled_loops", lambda: None)
    data = _chain(qtype, batch=2)
    program = offload.load(data)
    if passes == "optimized":
        program = offload.optimize(program)
    module = offload.runtime.load(offload.save(program))
    steps = _steps(module, specialized=False)
    if passes == "optimized" and qtype == "uint8-128":  # the QuantizeLinears lost their zero points
        pairs = [s for s in steps if type(getattr(s, "call", None)) is QuantizePairCall]
        assert [len(s.kernel.first.in_slots) for s in pairs] == [2, 2, 2]
    assert sum(type(getattr(s, "call", None)) is QuantizePairCall for s in steps) == 3
    assert sum(type(s) is _FusedAway and s.kernel.op_name == "onnx::DequantizeLinear" for s in steps) == 3
    x = _input()
    want = _as_written(data).run(None, {"x": x})[0]
    assert np.count_nonzero(want == want.max()) > 1 and np.count_nonzero(want == want.min()) > 1
    for _ in range(2):  # the second run takes the bound calls
        got = module.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], want)


def test_pairs_fuse_in_shape_specializations():
    """A symbolic batch: the steps prepared for the shapes seen fuse the pairs too."""
    data = _chain("uint8")
    module = offload.runtime.load(offload.save(offload.load(data)))
    session = _as_written(data)
    for batch in (2, 2, 2, 1):
        x = _input(batch)
        np.testing.assert_array_equal(module.run({"x": x})["y"], session.run(None, {"x": x})[0])
    steps = _steps(module, specialized=True)
    assert sum(type(getattr(s, "call", None)) is QuantizePairCall for s in steps) == 3


def _second_reader(kind: str) -> bytes:
    """Q → DQ where q is also read by a second DequantizeLinear, or is itself a result."""
    nodes = [
        helper.make_node("Add", ["x", "o"], ["a"]),
        helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 33])]
    if kind == "second op":
        nodes.append(helper.make_node("DequantizeLinear", ["q", "s2"], ["y2"]))
        outputs.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 33]))
    else:
        outputs.append(helper.make_tensor_value_info("q", TensorProto.INT8, [4, 33]))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 33])],
        outputs,
        [
            numpy_helper.from_array(np.zeros((), np.float32), "o"),
            numpy_helper.from_array(np.array(0.5, np.float32), "s"),
            numpy_helper.from_array(np.array(0.125, np.float32), "s2"),
            numpy_helper.from_array(np.array(5, np.int8), "zp"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("kind", ["second op", "result"])
def test_quantized_values_read_elsewhere_keep_two_steps(kind):
    data = _second_reader(kind)
    module = offload.runtime.load(offload.save(offload.load(data)))
    calls = [type(s.call) for s in module.method("forward")._steps if isinstance(s, _PreparedStep)]
    assert QuantizePairCall not in calls and _QuantizeCall in calls and _DequantizeCall in calls
    x = _input().reshape(-1)[: 4 * 33].reshape(4, 33)
    session = _as_written(data)
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, {"x": x})))
    for _ in range(2):
        got = module.run({"x": x})
        for name in names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_per_axis_pairs_stay_two_steps():
    """A scale per channel has no prepared call: the kernels run, op by op, as onnxruntime."""
    scale = np.array([0.5, 0.25, 1.0], np.float32)
    zp = np.array([1, -2, 0], np.int8)
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1),
            helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 6, 7])],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "zp")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    module = offload.runtime.load(offload.save(offload.load(data)))
    assert not any(
        type(getattr(s, "call", None)) is QuantizePairCall for s in module.method("forward")._steps
    )
    x = _input()
    np.testing.assert_array_equal(module.run({"x": x})["y"], _as_written(data).run(None, {"x": x})[0])


@pytest.mark.parametrize("loops", ["compiled", "numpy"])
@pytest.mark.parametrize("shift", [-600, -64, -1, 0, 1, 64, 600])
def test_an_output_place_over_its_input_gives_the_two_calls_bits(shift, loops, monkeypatch):
    """y's arena place may be x's, or overlap it from either side (their lifetimes touch): the
    call gives the two prepared calls' floats either way (NaN dequantized from 0), across the
    compiled loop's blocks of 512."""
    from offload.runtime.kernels import quantize_pair

    rng = np.random.default_rng(5)
    n = 2000
    x0 = (rng.integers(-400, 400, n) * 0.25).astype(np.float32)
    x0[:4] = [np.nan, np.inf, -np.inf, -0.0]
    scale, zero = np.array(0.5, np.float32), np.array(7, np.uint8)
    q = np.empty(n, np.uint8)
    want = np.empty(n, np.float32)
    _QuantizeCall()(q, x0, scale, zero)
    _DequantizeCall()(want, q, scale, zero)
    if loops == "numpy":
        monkeypatch.setattr(quantize_pair, "compiled_loops", lambda: None)
    arena = np.zeros(n + 1400, np.float32)
    x = arena[700 : 700 + n]
    out = arena[700 + shift : 700 + shift + n]
    x[...] = x0
    QuantizePairCall(np.uint8, 3)(out, x, scale, zero, scale, zero)
    np.testing.assert_array_equal(out, want)


# a = x + 0 and b = x · 3, for the steps after them to quantize
_TWO_BRANCHES = [helper.make_node("Add", ["x", "o"], ["a"]), helper.make_node("Mul", ["x", "three"], ["b"])]


def _two_branch_model(nodes: list, batch, hw: tuple) -> bytes:
    """x (batch, 3, *hw) → ``nodes`` → y, with the constants o = 0, three = 3, s = 0.5, zp = 3."""
    inits = [
        numpy_helper.from_array(np.zeros((), np.float32), "o"),
        numpy_helper.from_array(np.array(3, np.float32), "three"),
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(3, np.int8), "zp"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, *hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, *hw])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()


@pytest.mark.parametrize("batch", [2, "N"], ids=["static", "specialized"])
def test_interleaved_pairs_fuse_with_their_places_kept(batch):
    """Q, Q, DQ, DQ (an attention's projections): the first pair writes its floats before the
    second QuantizeLinear runs, so its place must hold no value that one reads (the file's
    arena views, checked) or that a specialization's arena gives it (the fused step says it
    writes them there); onnxruntime's floats either way."""
    nodes = [
        *_TWO_BRANCHES,
        helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["qa"]),
        helper.make_node("QuantizeLinear", ["b", "s", "zp"], ["qb"]),
        helper.make_node("DequantizeLinear", ["qa", "s", "zp"], ["ya"]),
        helper.make_node("DequantizeLinear", ["qb", "s", "zp"], ["yb"]),
        helper.make_node("Sub", ["ya", "yb"], ["y"]),
    ]
    data = _two_branch_model(nodes, batch, (6, 7))
    module = offload.runtime.load(offload.save(offload.load(data)))
    session = _as_written(data)
    x = _input()
    for _ in range(4):
        np.testing.assert_array_equal(module.run({"x": x})["y"], session.run(None, {"x": x})[0])
    steps = _steps(module, specialized=batch == "N")
    pairs = [type(s.kernel).__name__ for s in steps if type(getattr(s, "call", None)) is QuantizePairCall]
    assert pairs == ["_EarlyPair", "_KernelPair"]


def test_a_pair_whose_place_a_step_between_reads_stays_two_steps():
    """Q(a), Transpose(b), DQ: the memory plan gives y the bytes of b, which the Transpose
    between reads last; written at the QuantizeLinear's place, y would overwrite b first."""
    nodes = [
        *_TWO_BRANCHES,
        helper.make_node("QuantizeLinear", ["a", "s", "zp"], ["qa"]),
        helper.make_node("Transpose", ["b"], ["c"], perm=[0, 1, 3, 2]),
        helper.make_node("DequantizeLinear", ["qa", "s", "zp"], ["ya"]),
        helper.make_node("Sub", ["ya", "c"], ["d"]),
        helper.make_node("Add", ["d", "a"], ["y"]),
    ]
    data = _two_branch_model(nodes, 2, (7, 7))
    module = offload.runtime.load(offload.save(offload.load(data)))
    method = module.method("forward")
    kernels = [getattr(s, "kernel", s) for s in method._steps]
    (b,) = [k.out_slots[0] for k in kernels if k.op_name == "onnx::Mul"]
    (y,) = [k.out_slots[0] for k in kernels if k.op_name == "onnx::DequantizeLinear"]
    assert np.may_share_memory(method._planned[y], method._planned[b])  # the case at hand
    fused = any(type(getattr(s, "call", None)) is QuantizePairCall for s in method._steps)
    x = (np.random.default_rng(6).integers(-400, 400, (2, 3, 7, 7)) * 0.25).astype(np.float32)
    session = _as_written(data)
    for _ in range(2):
        np.testing.assert_array_equal(module.run({"x": x})["y"], session.run(None, {"x": x})[0])
    assert not fused
