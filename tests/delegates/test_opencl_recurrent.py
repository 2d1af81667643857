"""The `opencl` backend's RNN, GRU and LSTM on PoCL, against onnxruntime.

onnxruntime has no kernels for layout=1 (batch first): the reference of a layout-1 model is the
same op in layout 0 between Transposes (``_case`` registers it as the model's reference).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.delegates import registry
from offload.delegates.cuda import blob, nvrtc
from offload.delegates.cuda.record import record
from offload.delegates.gpu.api import source
from offload.delegates.gpu.ops import recurrent
from offload.errors import ModelFormatError

from . import opencl_support
from .opencl_support import check, model, needs_opencl, reference

pytestmark = needs_opencl
RNG = np.random.default_rng(23)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTPUTS = {"RNN": ["Y", "Y_h"], "GRU": ["Y", "Y_h"], "LSTM": ["Y", "Y_h", "Y_c"]}
OPS = list(GATES)
DIRECTIONS = ["forward", "reverse", "bidirectional"]
TOL = {"rtol": 1e-5, "atol": 1e-5, "whole": True}


def _normal(shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _case(
    op,
    T=5,
    N=3,
    I=4,
    H=6,
    direction="forward",
    layout=0,
    bias=True,
    lens=None,
    const_lens=False,
    init=False,
    peep=False,
    outputs=None,
    graph_outputs=None,
    half=False,
    **attrs,
):
    """(program, feeds) of one op: X, sequence_lens (unless ``const_lens``) and the initial states
    are graph inputs, W, R, B, P initializers. ``outputs``: the node's ('' for an absent one);
    ``graph_outputs``: those the graph returns (default: every present one). ``half``: values that
    half represents exactly."""
    D, G = (2 if direction == "bidirectional" else 1), GATES[op]
    outputs = outputs or OUTPUTS[op]
    graph_outputs = graph_outputs or [o for o in outputs if o]
    value = (lambda s, k=1.0: _normal(s, k).astype(np.float16).astype(np.float32)) if half else _normal
    x_shape = [N, T, I] if layout else [T, N, I]
    state = [N, D, H] if layout else [D, N, H]
    weights = [("W", value((D, G * H, I), 0.5)), ("R", value((D, G * H, H), 0.5))]
    inputs, feeds = [("x", x_shape)], {"x": value(x_shape)}
    names = ["x", "W", "R", ""]
    if bias:
        weights.append(("B", value((D, 2 * G * H), 0.5)))
        names[3] = "B"
    names.append("" if lens is None else "lens")
    if lens is not None and const_lens:
        weights.append(("lens", np.array(lens, np.int32)))
    elif lens is not None:
        inputs.append(("lens", [N], np.int32))
        feeds["lens"] = np.array(lens, np.int32)
    for s in ["h0", "c0"][: 2 if op == "LSTM" else 1]:
        names.append(s if init else "")
        if init:
            inputs.append((s, state))
            feeds[s] = value(state)
    if peep:
        names.append("P")
        weights.append(("P", value((D, 3 * H), 0.5)))
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, outputs, hidden_size=H, direction=direction, layout=layout, **attrs)
    program = model([node], inputs, graph_outputs, weights)
    if layout:
        # the same op in layout 0, between Transposes, for onnxruntime
        to0 = {"x": "x_0", "h0": "h0_0", "c0": "c0_0"}
        nodes = [helper.make_node("Transpose", [n], [to0[n]], perm=[1, 0, 2]) for n in names if n in to0]
        names0 = [to0.get(n, n) for n in names]
        outs0 = [f"{o}_0" if o else "" for o in outputs]
        attrs0 = {"hidden_size": H, "direction": direction, "layout": 0, **attrs}
        nodes.append(helper.make_node(op, names0, outs0, **attrs0))
        for o, o0 in zip(outputs, outs0):
            if o in graph_outputs:
                perm = [2, 0, 1, 3] if o == "Y" else [1, 0, 2]
                nodes.append(helper.make_node("Transpose", [o0], [o], perm=perm))
        ref = model(nodes, inputs, graph_outputs, weights)
        opencl_support._ONNX[program] = opencl_support._ONNX[ref]
    return program, feeds


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_directions(op, direction, tmp_path):
    check(*_case(op, direction=direction), tmp_path, **TOL)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op", OPS)
def test_sequence_lens_and_initial_states(op, direction, tmp_path):
    # unequal lengths: the whole sequence, shorter ones, and an empty one (final states 0)
    p, feeds = _case(op, T=5, N=4, direction=direction, lens=[5, 2, 0, 3], init=True)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("op", OPS)
def test_initial_states_without_lens(op, tmp_path):
    check(*_case(op, direction="bidirectional", init=True), tmp_path, **TOL)


def test_constant_sequence_lens_without_bias(tmp_path):
    p, feeds = _case("LSTM", N=3, direction="bidirectional", lens=[1, 5, 4], const_lens=True, bias=False)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("input_forget", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_lstm_peepholes(direction, input_forget, tmp_path):
    p, feeds = _case("LSTM", direction=direction, peep=True, init=True, input_forget=input_forget)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gru_linear_before_reset(direction, tmp_path):
    p, feeds = _case("GRU", N=4, direction=direction, lens=[5, 1, 3, 0], init=True, linear_before_reset=1)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("op", OPS)
def test_clip(op, tmp_path):
    p, feeds = _case(op, direction="bidirectional", lens=[4, 5, 2], init=True, clip=0.4)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", OPS)
def test_layout_batch_first(op, direction, tmp_path):
    p, feeds = _case(op, N=4, direction=direction, layout=1, lens=[2, 5, 0, 4], init=True)
    check(p, feeds, tmp_path, **TOL)


def test_layout_batch_first_gru_linear_before_reset(tmp_path):
    p, feeds = _case("GRU", direction="bidirectional", layout=1, linear_before_reset=1)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize(
    "op,outputs,graph_outputs",
    [
        ("RNN", ["Y"], None),
        ("RNN", ["", "Y_h"], None),
        ("GRU", ["Y"], None),
        ("GRU", ["", "Y_h"], None),
        ("LSTM", ["Y"], None),
        ("LSTM", ["", "Y_h"], None),
        ("LSTM", ["", "", "Y_c"], None),
        ("LSTM", ["Y", "", "Y_c"], None),
        ("LSTM", ["Y", "Y_h", "Y_c"], ["Y_h"]),  # listed, not read
        ("GRU", ["Y", "Y_h"], ["Y"]),
    ],
)
def test_missing_outputs(op, outputs, graph_outputs, tmp_path):
    p, feeds = _case(
        op, direction="bidirectional", lens=[3, 5, 1], outputs=outputs, graph_outputs=graph_outputs
    )
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize("op", OPS)
def test_larger_sizes(op, tmp_path):
    # 56 x 320 (LSTM) projections run on the blocked GEMM; recurrent sums of 40 products
    N = 8
    lens = [7, 3, 7, 1, 6, 7, 2, 5]
    p, feeds = _case(op, T=7, N=N, I=64, H=40, direction="bidirectional", lens=lens, init=True)
    check(p, feeds, tmp_path, rtol=1e-4, atol=1e-5, whole=True)


# Every activation ONNX lists, with explicit alphas / betas and with the defaults (LeakyRelu
# 0.01, HardSigmoid 0.2 / 0.5, Elu 1.0), on a bidirectional RNN (one function per direction).
@pytest.mark.parametrize(
    "activations,alpha,beta",
    [
        (["Relu", "Tanh"], None, None),
        (["Sigmoid", "Softsign"], None, None),
        (["Softplus", "Affine"], [0.7], [-0.2]),
        (["LeakyRelu", "ThresholdedRelu"], [0.2, 0.3], None),
        (["ScaledTanh", "HardSigmoid"], [1.5, 0.3], [0.6, 0.4]),
        (["Elu", "Elu"], [0.8], None),
        (["LeakyRelu", "HardSigmoid"], None, None),
        (["Elu", "Relu"], None, None),
    ],
)
def test_rnn_activations(activations, alpha, beta, tmp_path):
    attrs = {"activations": activations}
    attrs |= {"activation_alpha": alpha} if alpha else {}
    attrs |= {"activation_beta": beta} if beta else {}
    p, feeds = _case("RNN", direction="bidirectional", lens=[5, 2, 4], init=True, **attrs)
    check(p, feeds, tmp_path, **TOL)


@pytest.mark.parametrize(
    "op,activations,alpha,beta",
    [
        ("GRU", ["HardSigmoid", "Softsign", "Sigmoid", "ScaledTanh"], [0.25, 1.2], [0.55, 0.8]),
        ("GRU", ["Sigmoid", "Relu"], None, None),
        (
            "LSTM",
            ["HardSigmoid", "Elu", "Softplus", "Sigmoid", "LeakyRelu", "Affine"],
            [0.3, 0.9, 0.05, 0.5],
            [0.45, 0.1],
        ),
        ("LSTM", ["Sigmoid", "Tanh", "Relu"], None, None),
        ("RNN", ["Relu"], None, None),
    ],
)
def test_gate_activations(op, activations, alpha, beta, tmp_path):
    D = len(activations) // len(recurrent.DEFAULT_ACTIVATIONS[op])
    attrs = {"activations": activations}
    attrs |= {"activation_alpha": alpha} if alpha else {}
    attrs |= {"activation_beta": beta} if beta else {}
    direction = "bidirectional" if D == 2 else "reverse"
    p, feeds = _case(op, direction=direction, lens=[3, 5, 4], init=True, peep=op == "LSTM", clip=2.5, **attrs)
    check(p, feeds, tmp_path, **TOL)


def test_default_activations_spelled_out_need_no_names_in_the_plan(tmp_path):
    attrs = {"activations": ["Sigmoid", "Tanh", "Tanh", "sigmoid", "tanh", "tanh"]}
    check(*_case("LSTM", direction="bidirectional", **attrs), tmp_path, **TOL)


# ---- fp16 storage ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,attrs", [("RNN", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("LSTM", {})]
)
def test_fp16_storage(op, attrs, tmp_path):
    """precision=fp16: X, weights, the projection and Y / Y_h / Y_c stored as half, the state
    kept in float32. Each stored O(1) value errs by up to 2^-11 relative; the projection's error
    passes through the gates (5e-4 at most here), hence 4u."""
    peep = op == "LSTM"
    p, feeds = _case(op, direction="bidirectional", lens=[5, 2, 4], init=True, peep=peep, half=True, **attrs)
    want = reference(p, feeds)
    lowered = offload.to_backend(
        p, "opencl", compile_specs={"opencl": {"precision": "fp16", "mixed": "0"}}, passes="none"
    )
    assert [o.op_type for o in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    assert [d[:2] for d in module.method(module.method_names[0]).delegates] == [("opencl", "backend")]
    got = module.run(feeds)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        np.testing.assert_allclose(got[k], v, rtol=2e-3, atol=2e-3, err_msg=k)


# ---- launches and programs ---------------------------------------------------------------------


def _recorded(program, blas: bool):
    """The device-free record of ``program`` lowered whole to cuda (what every GPU builder is asked)."""
    lowered = offload.to_backend(program, "cuda", passes="none")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan, _ = blob.unpack(d.attributes["processed"])
    host = {int(i): d.attributes["fallback"].constants[n].const_value for i, n in plan["weights"].items()}
    return record(plan, host, blas=blas)


@pytest.mark.parametrize(
    "op,attrs,per_step",
    [("RNN", {}, 1), ("LSTM", {}, 1), ("GRU", {"linear_before_reset": 1}, 1), ("GRU", {}, 2)],
)
def test_one_projection_then_launches_per_step(op, attrs, per_step):
    T = 6
    b = _recorded(_case(op, T=T, direction="bidirectional", **attrs)[0], blas=False)
    states = 2 if op == "LSTM" else 1
    kernels = [launch.kernel for launch in b.launches]
    # the projection GEMM, the initial states, the steps (both directions each), the final states
    assert len(kernels) == 1 + states + per_step * T + states, kernels
    assert kernels[0].startswith("gemm") and kernels[-1] == "rnn_state_final"


def _recurrent_programs(program) -> set:
    b = _recorded(program, blas=True)
    assert len(b.gemms) == 1  # the projection goes to cuBLAS on CUDA
    return set(b.programs)


def test_a_new_shape_reuses_the_built_program():
    small = _recurrent_programs(_case("LSTM", T=3, N=2, I=4, H=5)[0])
    large = _recurrent_programs(_case("LSTM", T=9, N=7, I=3, H=11, direction="bidirectional", layout=1)[0])
    assert small == large and len(small) == 1


@pytest.mark.skipif(not nvrtc.available(), reason=nvrtc.IMPORT_ERROR)
@pytest.mark.parametrize("options", ["", "-DOFFLOAD_FP16"])
def test_the_cuda_build_does_float_math_only(options):
    # every literal and builtin of recurrent.cl in float: no f64 instruction in its PTX
    ptx = nvrtc.compile(source("recurrent.cl"), options, "sm_80", "ptx").decode()
    assert ".entry lstm_step(" in ptx and ".f64" not in ptx


# ---- what stays on the CPU ---------------------------------------------------------------------


def _node_program(op, inputs_shapes, attrs, dtype=np.float32):
    T, N, I = inputs_shapes
    H, G = 3, GATES[op]
    weights = [("W", np.ones((1, G * H, I), dtype)), ("R", np.ones((1, G * H, H), dtype))]
    node = helper.make_node(op, ["x", "W", "R"], ["Y"], **attrs)
    return model([node], [("x", [T, N, I], dtype)], [("Y", dtype)], weights)


@pytest.mark.parametrize(
    "op,attrs,dtype,reason",
    [
        ("RNN", {"activations": ["Affine"]}, np.float32, "default is ambiguous"),
        (
            "LSTM",
            {"activations": ["Sigmoid", "ScaledTanh", "Tanh"], "activation_alpha": [1.0]},  # no beta
            np.float32,
            "default is ambiguous",
        ),
        ("GRU", {"activations": ["ThresholdedRelu", "Tanh"]}, np.float32, "default is ambiguous"),
        ("LSTM", {"activations": ["Sigmoid", "Tanh"]}, np.float32, "2 activations for 1 direction"),
        ("RNN", {"activations": ["Relu", "Tanh"]}, np.float32, "2 activations for 1 direction"),
        ("GRU", {"activations": ["Sigmoid", "Gelu"]}, np.float32, "activation 'Gelu'"),
        ("RNN", {"hidden_size": 4}, np.float32, "hidden_size 4 but R"),
        ("LSTM", {}, np.float64, "dtype fp64"),
    ],
)
def test_refused_ops_stay_on_the_cpu(op, attrs, dtype, reason):
    p = _node_program(op, (2, 1, 2), attrs, dtype)
    support = registry.get("opencl").compiler().supports(p.main.body.operations[0])
    assert not support and reason in support.reason, support
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert [o.op_type for o in lowered.main.body.operations] == [op]


def test_a_plan_whose_weights_do_not_fit_is_malformed():
    p, _ = _case("GRU", I=4, H=6)
    lowered = offload.to_backend(p, "cuda", passes="none")
    (d,) = [op for op in lowered.main.body.operations if op.op_type == "Delegate"]
    plan, _ = blob.unpack(d.attributes["processed"])
    host = {int(i): d.attributes["fallback"].constants[n].const_value for i, n in plan["weights"].items()}
    w = next(i for i, n in plan["weights"].items() if n == "W")
    plan = json.loads(json.dumps(plan))
    plan["shapes"][w] = [1, 18, 3]  # W for an input size of 3, X has 4
    host[int(w)] = np.ones((1, 18, 3), np.float32)
    with pytest.raises(ModelFormatError, match="W of shape"):
        record(plan, host)


# ---- symbolic sequence length and batch ----------------------------------------------------------


def test_symbolic_sequence_and_batch_specialize_per_shape(tmp_path):
    H, I = 5, 3
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "lens", "h0"], ["Y", "Y_h"], hidden_size=H)
    weights = [("W", _normal((1, 4 * H, I), 0.5)), ("R", _normal((1, 4 * H, H), 0.5))]
    weights.append(("B", _normal((1, 8 * H))))
    inputs = [("x", ["T", "N", I]), ("lens", ["N"], np.int32), ("h0", [1, "N", H])]
    p = model([node], inputs, ["Y", "Y_h"], weights)
    lowered = offload.to_backend(p, "opencl", passes="none")
    assert [o.op_type for o in lowered.main.body.operations] == ["Delegate"]
    offload.save(lowered, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    for T, lens in [(4, [4, 1, 3]), (2, [2, 0]), (6, [6])]:
        N = len(lens)
        feeds = {"x": _normal((T, N, I)), "lens": np.array(lens, np.int32), "h0": _normal((1, N, H))}
        want, got = reference(p, feeds), module.run(feeds)
        for k, v in want.items():
            assert got[k].shape == v.shape, k
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5, err_msg=k)
