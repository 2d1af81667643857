"""The compiled loops (runtime/kernels/loops.py, numba). The depthwise convolution (the plan's
``direct`` path): sums against float64 numpy sums over a range of geometries, the numpy rows
path's bits, both loops' bits alike, an output written over its input, two threads, a model
against onnxruntime (not chained with the pointwise conv after it). The column matrix (im2col)
and HardSigmoid / HardSwish in one pass: the bits of the numpy calls they replace. The switch
that turns the loops off, and no numba import without a use."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import offload
from offload.runtime.kernels import _util, buffers, conv_recipe, windows
from offload.runtime.kernels.conv import _ConvCall, _ConvChain
from offload.runtime.steps import _PreparedStep

from .harness import concurrently, depthwise_sums
from .onnx_graphs import model_bytes

pytestmark = pytest.mark.skipif(
    _util.compiled_loops() is None, reason="numba is not installed here (or OFFLOAD_JIT=0)"
)

# (channels, height, width, kernel, strides, pads (top, left, bottom, right), dilations)
GEOMETRIES = [
    (8, 10, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (5, 12, 17, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # one tap on the image itself: no phases
    (8, 10, 12, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # odd left pad: even columns to phase 1
    (6, 8, 16, (3, 3), (2, 2), (2, 2, 2, 2), (1, 1)),  # even left pad, even width
    (6, 8, 15, (3, 3), (2, 2), (0, 0, 1, 1), (1, 1)),  # odd width: one even column more
    (6, 8, 15, (3, 3), (2, 2), (1, 4, 1, 0), (1, 1)),
    (5, 11, 9, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    (3, 13, 13, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    (4, 9, 9, (3, 3), (3, 3), (1, 0, 0, 1), (1, 1)),
    (4, 9, 9, (2, 2), (1, 1), (0, 0, 0, 0), (1, 1)),
    (6, 7, 7, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
    (6, 7, 16, (3, 3), (2, 2), (3, 5, 1, 2), (3, 3)),
    (2, 20, 3, (3, 3), (1, 1), (4, 4, 4, 4), (1, 1)),  # more padding than image across
    (7, 9, 11, (3, 5), (1, 2), (0, 1, 2, 1), (2, 1)),
    (3, 12, 10, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (9, 1, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (33, 30, 29, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
]


def _plan(x_shape, kernel, strides, pads, dilations, dtype):
    g = windows._geometry("Conv", x_shape, kernel, "NOTSET", dilations, pads, strides)
    return conv_recipe._ConvRecipe(x_shape, (x_shape[1], 1) + kernel, dtype, g, x_shape[1])


def _run(plan, x, w, b, out=None):
    out = np.empty(plan.out_shape, plan.dtype) if out is None else out
    buffers._run_calls(plan.calls(out, x, w, b, buffers._Buffers()))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize(
    "case", GEOMETRIES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-k{c[3]}-s{c[4]}-p{c[5]}-d{c[6]}"
)
def test_direct_matches_float64_sums(case, bias, dtype):
    c, h, wd, kernel, strides, pads, dilations = case
    rng = np.random.default_rng(sum(case[:3]))
    x = rng.standard_normal((2, c, h, wd)).astype(dtype)
    w = rng.standard_normal((c, 1) + kernel).astype(dtype)
    b = rng.standard_normal(c).astype(dtype) if bias else None
    plan = _plan(x.shape, kernel, strides, pads, dilations, dtype)
    assert plan.path == "direct"
    got = _run(plan, x, w, b)
    want = depthwise_sums(x, w, b, strides, pads, dilations)
    assert want.shape == plan.out_shape
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_array_equal(_run(plan, x, w, b), got)  # a second run, the same bits


@pytest.mark.parametrize("case", GEOMETRIES[:7], ids=lambda c: f"k{c[3]}-s{c[4]}-p{c[5]}")
def test_direct_gives_the_rows_paths_bits(case):
    """Each output is its first tap's product, then each other tap's product added in the weights'
    order, then the bias: the multiplies and adds of the numpy rows path, so turning the loops
    off does not change a result."""
    c, h, wd, kernel, strides, pads, dilations = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    rows = _plan(x.shape, kernel, strides, pads, dilations, np.float32)
    rows.path = "rows"
    direct = _plan(x.shape, kernel, strides, pads, dilations, np.float32)
    direct.path = "direct"
    np.testing.assert_array_equal(_run(direct, x, w, b), _run(rows, x, w, b))


@pytest.mark.parametrize(
    "case", GEOMETRIES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-k{c[3]}-s{c[4]}-p{c[5]}-d{c[6]}"
)
def test_both_loops_give_the_same_bits(case):
    """The plan takes loops.depthwise_last for small outputs and loops.depthwise for the others:
    the same multiplies and adds per output, so the size rule cannot change a result."""
    c, h, wd, kernel, strides, pads, dilations = case
    rng = np.random.default_rng(11)
    x = rng.standard_normal((c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c,) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    out_shape = _plan((1, c, h, wd), kernel, strides, pads, dilations, np.float32).out_shape[1:]
    loops = _util.compiled_loops()
    results = []
    for depthwise in (loops.depthwise, loops.depthwise_last):
        for bias in (b, np.empty(0, np.float32)):
            out = np.full(out_shape, np.nan, np.float32)
            depthwise(x, w, bias, out, *strides, pads[0], pads[1], *dilations)
            results.append(out)
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_array_equal(results[1], results[3])
    assert not np.isnan(results[0]).any() and not np.isnan(results[1]).any()


def test_an_output_written_over_its_input():
    """The arena may give a conv's output its input's memory: every input channel is read first."""
    c, h, wd = 16, 12, 12
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    plan = _plan(x.shape, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), np.float32)
    want = depthwise_sums(x, w, b, pads=(1, 1, 1, 1))
    shared = x.copy()
    got = _run(plan, shared, w, b, out=shared)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_two_threads_run_one_plan_at_once():
    """The loops allocate their scratch per call and release the GIL: two threads, one plan."""
    c, h, wd = 24, 40, 40
    rng = np.random.default_rng(7)
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    plan = _plan((1, c, h, wd), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), np.float32)
    inputs = [rng.standard_normal((1, c, h, wd)).astype(np.float32) for _ in range(2)]
    wants = [_run(plan, x, w, b) for x in inputs]
    for x, want in zip(inputs, wants):
        sums = depthwise_sums(x, w, b, (2, 2), (1, 1, 1, 1))
        np.testing.assert_allclose(want, sums, rtol=1e-5, atol=1e-5 * np.abs(sums).max())

    def work(k):  # each thread's results bit for bit those of one thread alone
        for _ in range(50):
            np.testing.assert_array_equal(_run(plan, inputs[k], w, b), wants[k])

    concurrently(work)


def _mobile_block() -> bytes:
    """Neg -> depthwise 3 x 3 (bias) -> Clip(0, 6) -> pointwise 1 x 1 (bias): MobileNetV2's tail of
    a block, whose two convs the numpy paths chain."""
    rng = np.random.default_rng(8)
    c, m = 32, 16
    inits = [
        ("wd", rng.standard_normal((c, 1, 3, 3)).astype(np.float32)),
        ("bd", rng.standard_normal(c).astype(np.float32)),
        ("lo", np.array(0, np.float32)),
        ("hi", np.array(6, np.float32)),
        ("wp", rng.standard_normal((m, c, 1, 1)).astype(np.float32)),
        ("bp", rng.standard_normal(m).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Neg", ["x"], ["r"]),
        helper.make_node("Conv", ["r", "wd", "bd"], ["d"], group=c, pads=(1, 1, 1, 1), strides=(2, 2)),
        helper.make_node("Clip", ["d", "lo", "hi"], ["a"]),
        helper.make_node("Conv", ["a", "wp", "bp"], ["y"]),
    ]
    return model_bytes(
        nodes, [("x", TensorProto.FLOAT, [1, c, 29, 31])], [("y", TensorProto.FLOAT, None)], inits, opset=17
    )


def test_a_direct_depthwise_conv_is_not_chained_and_matches_onnxruntime():
    data = _mobile_block()
    program = offload.load(data)
    method = offload.runtime.load(offload.save(program)).method("forward")
    calls = [s.call for s in method._steps if isinstance(s, _PreparedStep)]
    assert not any(isinstance(call, _ConvChain) for call in calls)
    assert [call.recipe.path for call in calls if isinstance(call, _ConvCall)] == ["direct", "pointwise"]
    x = np.random.default_rng(9).standard_normal((1, 32, 29, 31)).astype(np.float32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for _ in range(2):
        got = method.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(offload.evaluate(program, {"x": x})["y"], got)


# (input shape, weights shape, group, strides, pads, dilations): convs on the columns path
COLUMNS = [
    ((1, 3, 37, 35), (16, 3, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),  # a stem
    ((2, 6, 17, 16), (10, 3, 3, 2), 2, (3, 2), (2, 0, 1, 1), (1, 2)),
    ((1, 12, 15, 14), (18, 4, 3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 8, 12, 12), (8, 8, 1, 1), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 4, 9, 20), (5, 4, 5, 3), 1, (1, 3), (4, 1, 0, 6), (2, 1)),
    ((1, 2, 5, 5), (3, 2, 3, 3), 1, (1, 1), (3, 3, 3, 3), (1, 1)),  # rows of padding alone
    # stride 2 across, more than two taps across: by the row's halves (im2col_halves)
    ((1, 3, 30, 31), (8, 3, 5, 5), 1, (2, 2), (1, 1, 2, 2), (1, 1)),  # a 5 x 5 stem, TFLite's SAME
    ((1, 4, 9, 20), (6, 2, 3, 4), 2, (1, 2), (1, 0, 2, 3), (2, 1)),
    ((1, 3, 8, 9), (4, 3, 3, 3), 1, (2, 2), (0, 3, 4, 1), (1, 1)),  # more padding than taps left
    # 2 x 2 at stride 2: each input row split into its two taps' rows (im2col_pairs)
    ((1, 6, 10, 12), (5, 6, 2, 2), 1, (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 4, 11, 13), (6, 2, 2, 2), 2, (2, 2), (1, 3, 2, 0), (1, 1)),  # odd sizes, pads
]


def _columns_case(case, seed: int) -> tuple:
    """A columns-path case's input, weights, bias and recipe."""
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    g = windows._geometry("Conv", x_shape, w_shape[2:], "NOTSET", dilations, pads, strides)
    plan = conv_recipe._ConvRecipe(x_shape, w_shape, np.float32, g, group)
    assert plan.path == "columns"
    return x, w, b, plan


def _takes_im2col(plan, x, w, b) -> bool:
    calls = plan.calls(np.empty(plan.out_shape, np.float32), x, w, b, buffers._Buffers())
    return any(getattr(c, "func", None) is _util.compiled_loops().im2col for c in calls)


@pytest.mark.parametrize("case", COLUMNS, ids=lambda c: f"{c[0]}-{c[1]}-g{c[2]}-s{c[3]}")
def test_im2col_gives_the_numpy_columns(case, monkeypatch):
    """The columns path's column matrix by loops.im2col holds numpy's copies' values: the same
    product, bit for bit; and the conv is float64 sums' within float32's rounding. (These column
    matrices are small enough for the numpy copy: the compiled loop is made to take them.)"""
    monkeypatch.setattr(conv_recipe, "_NUMPY_COLUMNS", 0)
    x, w, b, plan = _columns_case(case, 12)
    assert _takes_im2col(plan, x, w, b)
    got = _run(plan, x, w, b)
    _util._LOOPS, loops = False, _util._LOOPS
    try:
        want = _run(plan, x, w, b)
    finally:
        _util._LOOPS = loops
    np.testing.assert_array_equal(got, want)
    ref = ort.InferenceSession(_conv_model(case), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


# (input shape, weights shape, group, strides, pads, dilations): 1-D convs of a voice-activity
# net as the recipe sees them (height 1), column matrices of 192-1161 elements: its STFT (kernel
# 256 at stride 128), its encoder's kernel 3 at strides 1 and 2.
SMALL_COLUMNS = [
    ((1, 1, 1, 576), (258, 1, 1, 256), 1, (1, 128), (0, 0, 0, 0), (1, 1)),
    ((1, 129, 1, 3), (128, 129, 1, 3), 1, (1, 1), (0, 1, 0, 1), (1, 1)),
    ((1, 128, 1, 3), (64, 128, 1, 3), 1, (1, 2), (0, 1, 0, 1), (1, 1)),
    ((2, 64, 1, 2), (64, 64, 1, 3), 1, (1, 2), (0, 1, 0, 1), (1, 1)),
    ((1, 6, 5, 7), (4, 3, 3, 2), 2, (2, 3), (1, 0, 2, 1), (1, 2)),  # 2-D, groups, dilated
]


@pytest.mark.parametrize("case", SMALL_COLUMNS, ids=lambda c: f"{c[0]}-{c[1]}-s{c[3]}")
def test_a_small_column_matrix_is_a_numpy_copy_with_im2col_bits(case, monkeypatch):
    """A column matrix of at most _NUMPY_COLUMNS elements is copied from the padded image's window
    view (no compiled call to dispatch): the same columns as loops.im2col's, so the same product
    bit for bit, and within float32's rounding of onnxruntime's conv."""
    x_shape, w_shape, group, strides, pads, _ = case
    x, w, b, plan = _columns_case(case, 13)
    g = plan.g
    for bias in (b, None):
        assert not _takes_im2col(plan, x, w, bias)
        got = _run(plan, x, w, bias)
        with monkeypatch.context() as m:
            m.setattr(conv_recipe, "_NUMPY_COLUMNS", 0)
            want = _run(conv_recipe._ConvRecipe(x_shape, w_shape, np.float32, g, group), x, w, bias)
        np.testing.assert_array_equal(got, want)
    if x_shape[2] == 1:  # the 1-D conv itself, through a prepared step, against onnxruntime
        x1 = x[:, :, 0]
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=strides[1:], pads=pads[1::2])
        model = model_bytes(
            [node],
            [("x", TensorProto.FLOAT, list(x1.shape))],
            [("y", TensorProto.FLOAT, [x_shape[0], w_shape[0], g.out[1]])],
            [("w", w[:, :, 0]), ("b", b)],
        )
        method = offload.runtime.load(offload.save(offload.load(model))).method("forward")
        step = method._steps[0]
        assert isinstance(step, _PreparedStep) and step.call.inner.recipe.path == "columns"
        got = method.run({"x": x1})["y"]
        ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x1})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def _conv_model(case) -> bytes:
    x_shape, w_shape, group, strides, pads, dilations = case
    rng = np.random.default_rng(12)
    rng.standard_normal(x_shape)  # the test's input, drawn first
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], group=group, strides=strides, pads=pads, dilations=dilations
    )
    return model_bytes(
        [node],
        [("x", TensorProto.FLOAT, list(x_shape))],
        [("y", TensorProto.FLOAT, None)],
        [("w", w), ("b", b)],
        opset=17,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("swish", [True, False], ids=["HardSwish", "HardSigmoid"])
def test_hard_sigmoid_in_one_pass_gives_the_numpy_passes_bits(swish, dtype):
    from offload.runtime.kernels.elementwise import _hard_passes

    rng = np.random.default_rng(13)
    x = (rng.standard_normal(5000) * 6).astype(dtype)
    x[:8] = [np.nan, np.inf, -np.inf, -0.0, 0.0, -3.0, 3.0, 1e-30]  # NaN, the bends, signed zero
    for alpha, beta in ((1 / 6, 0.5), (0.2, 0.0), (0.25, -0.5)):
        want = np.empty_like(x)
        _util._LOOPS, loops = False, _util._LOOPS
        try:
            with np.errstate(invalid="ignore"):
                _hard_passes(want, x, alpha, beta, swish)()
        finally:
            _util._LOOPS = loops
        got = np.empty_like(x)
        one_pass = _hard_passes(got, x, alpha, beta, swish)
        assert one_pass.func is loops.hard_sigmoid
        one_pass()
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        # and the formula itself, in float64 (inf * 0 of HardSwish's far left is NaN in both)
        with np.errstate(invalid="ignore"):
            wide = np.clip(x.astype(np.float64) * alpha + beta, 0, 1) * (x if swish else 1)
        np.testing.assert_allclose(got, wide, rtol=1e-6, atol=1e-7, equal_nan=True)
        in_place = x.copy()
        _hard_passes(in_place, in_place, alpha, beta, swish)()
        np.testing.assert_array_equal(in_place.view(np.uint8), want.view(np.uint8))


def _in_a_process(code: str, **env) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_offload_jit_0_turns_the_loops_off():
    code = (
        "from offload.runtime.kernels import _util, conv_recipe, windows\n"
        "g = windows._geometry('Conv', (1, 8, 80, 80), (3, 3), 'NOTSET', (1, 1), (1, 1, 1, 1), (1, 1))\n"
        "print(_util.compiled_loops(), conv_recipe._ConvRecipe((1, 8, 80, 80), (8, 1, 3, 3), 'float32', g, 8).path)"
    )
    assert _in_a_process(code, OFFLOAD_JIT="0") == "None rows"


def test_a_model_without_a_convolution_does_not_import_numba():
    """numba takes 0.4 s to import: only a kernel or plan that uses the loops imports it."""
    code = (
        "import sys, numpy as np, offload\n"
        "from onnx import TensorProto, helper\n"
        "from tests.runtime.onnx_graphs import model_bytes\n"
        "w = np.ones((8, 4), np.float32)\n"
        "nodes = [helper.make_node('MatMul', ['x', 'w'], ['h']), helper.make_node('Relu', ['h'], ['y'])]\n"
        "data = model_bytes(nodes, [('x', TensorProto.FLOAT, [2, 8])], [('y', TensorProto.FLOAT, None)],"
        " [('w', w)], opset=17)\n"
        "m = offload.runtime.load(offload.save(offload.load(data))).method('forward')\n"
        "m.run({'x': np.ones((2, 8), np.float32)})\n"
        "print('numba' in sys.modules)"
    )
    assert _in_a_process(code) == "False"


@pytest.mark.parametrize(
    "attrs, bias, match",
    [
        (dict(strides=(0, 1)), 4, "strides"),
        (dict(dilations=(1, 0)), 4, "dilations"),
        (dict(pads=(-1, 0, 0, 0)), 4, "must not be negative"),
        (dict(pads=(1, 1, 1, 1)), 3, "bias of shape"),
    ],
    ids=["stride-0", "dilation-0", "negative-pad", "short-bias"],
)
def test_a_conv_the_loops_cannot_index_safely_is_refused(attrs, bias, match):
    """The compiled loops index without bounds checks: a stride or dilation under 1, a negative
    pad (none of them valid ONNX) or a bias of another length than the output channels is a
    ShapeError naming it, from the evaluator and from a .pte run alike, never a read past an array."""
    rng = np.random.default_rng(14)
    inits = [("w", rng.standard_normal((4, 1, 3, 3)).astype(np.float32)), ("b", np.ones(bias, np.float32))]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, **attrs)
    data = model_bytes(
        [node], [("x", TensorProto.FLOAT, [1, 4, 8, 8])], [("y", TensorProto.FLOAT, None)], inits, opset=17
    )
    feeds = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    with pytest.raises(offload.errors.ShapeError, match=match):
        offload.evaluate(offload.load(data), feeds)
    with pytest.raises(offload.errors.OffloadError, match=match):
        offload.runtime.load(offload.save(offload.load(data))).method("forward").run(feeds)


def test_loops_that_cannot_load_warn_and_leave_the_numpy_paths():
    """numba installed but unusable (its import of the loops fails, as without a writable cache
    directory): one RuntimeWarning that says what to do, and the numpy paths."""
    code = (
        "import sys, warnings, importlib.abc\n"
        "class Broken(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'offload.runtime.kernels.loops':\n"
        "            raise RuntimeError('cannot cache function: no locator available')\n"
        "sys.meta_path.insert(0, Broken())\n"
        "from offload.runtime.kernels import _util, conv_recipe, windows\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    loops = _util.compiled_loops()\n"
        "g = windows._geometry('Conv', (1, 8, 80, 80), (3, 3), 'NOTSET', (1, 1), (1, 1, 1, 1), (1, 1))\n"
        "print(loops, len(caught), 'NUMBA_CACHE_DIR' in str(caught[0].message),"
        " conv_recipe._ConvRecipe((1, 8, 80, 80), (8, 1, 3, 3), 'float32', g, 8).path)"
    )
    assert _in_a_process(code) == "None 1 True rows"


def test_float32_erf_is_within_an_ulp_and_the_same_bits_without_numba():
    """erf of float32 values by the rational function (``loops.erf32``): within one float32 ulp of
    Python's math.erf rounded to float32, over the range and at the special values; the numpy path
    (no numba) gives the same float64 bits."""
    import math

    from offload.runtime.kernels.approximations import _erf_rational
    from offload.runtime.kernels.loops import erf32

    rng = np.random.default_rng(11)
    x = np.concatenate(
        [
            rng.uniform(-6, 6, 20000),
            rng.uniform(-1e-3, 1e-3, 2000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -3.99, 1e-40],
        ]
    ).astype(np.float32)
    got = np.empty(x.shape)
    erf32(x, got)
    np.testing.assert_array_equal(got.view(np.int64), _erf_rational(x).view(np.int64))
    want = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    np.testing.assert_array_max_ulp(got.astype(np.float32), want, maxulp=1)
    special = got[-8:]
    assert np.signbit(special[1]) and special[2] == 1.0 and special[3] == -1.0 and np.isnan(special[4])


def test_erf_loop_is_pythons_erf_and_the_kernel_matches_onnxruntime():
    """The compiled erf against Python's math.erf in float64 (within 2 ulps), including the
    special values; then Erf and exact Gelu models against onnxruntime in float32."""
    import math

    from offload.runtime.kernels.loops import erf

    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-6, 6, 5000), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, 2.5, -2.5]])
    got = np.empty_like(x)
    erf(x, got)
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_array_max_ulp(got, want, maxulp=2)
    special = got[5000:]
    assert np.signbit(special[1]) and special[2] == 1.0 and special[3] == -1.0 and np.isnan(special[4])
    for op, attrs in (("Erf", {}), ("Gelu", {})):
        graph = helper.make_graph(
            [helper.make_node(op, ["x"], ["y"], **attrs)],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1000])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1000])],
        )
        data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
        feeds = {"x": rng.uniform(-5, 5, (3, 1000)).astype(np.float32)}
        want32 = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        got32 = offload.runtime.load(offload.save(offload.load(data))).run(feeds)["y"]
        np.testing.assert_allclose(got32, want32, rtol=2e-7, atol=1e-7, err_msg=op)


def test_float32_gelu_is_one_pass_with_the_same_bits_without_numba(monkeypatch):
    """Exact GELU of float32 values in one compiled pass (``loops.gelu32``): the numpy path (no
    numba) gives the same bits, special values included; against 0.5·x·(1 + erf(x/√2)) in float64
    with Python's math.erf: within 2 float32 ulps where the result is not a cancellation
    (x > -2), and within 4e-8 · |x| absolutely below (1 + erf cancels there)."""
    import math

    from offload.runtime.kernels import approximations
    from offload.runtime.kernels.loops import gelu32

    rng = np.random.default_rng(12)
    x = np.concatenate(
        [
            rng.uniform(-8, 8, 20000),
            rng.uniform(-1e-3, 1e-3, 2000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 3e38],
        ]
    ).astype(np.float32)
    got = np.empty(x.shape, np.float32)
    gelu32(x, got)
    monkeypatch.setattr(approximations, "compiled_loops", lambda: None)
    numpy_path = approximations._gelu_exact(x)
    np.testing.assert_array_equal(got.view(np.int32), numpy_path.view(np.int32))
    v = x[:-6].astype(np.float64)
    want = np.array([0.5 * t * (1.0 + math.erf(t / math.sqrt(2.0))) for t in v])
    plain = v > -2
    np.testing.assert_array_max_ulp(got[:-6][plain], want[plain].astype(np.float32), maxulp=2)
    assert np.all(np.abs(got[:-6][~plain] - want[~plain]) <= 4e-8 * np.abs(v[~plain]))
    assert got[-6] == 0 and got[-4] == np.inf and np.isnan(got[-3]) and np.isnan(got[-2]) and got[-1] == x[-1]


def _one_pass_and_its_twin(monkeypatch, loop, twin, x: np.ndarray) -> np.ndarray:
    """The compiled float32 loop's result on ``x``, checked bit for bit against the loop run in
    place and against its numpy twin (``twin(out, x)``, run with the compiled loops turned off)."""
    from offload.runtime.kernels import approximations

    got = np.empty_like(x)
    loop(x, got)
    in_place = x.copy()
    loop(in_place, in_place)
    np.testing.assert_array_equal(in_place.view(np.int32), got.view(np.int32))
    monkeypatch.setattr(approximations, "compiled_loops", lambda: None)
    numpy_path = np.empty_like(x)
    twin(numpy_path, x)
    np.testing.assert_array_equal(got.view(np.int32), numpy_path.view(np.int32))
    return got


def test_float32_sigmoid_is_one_pass_with_the_same_bits_without_numba(monkeypatch):
    """Sigmoid of float32 values in one compiled pass (``loops.sigmoid32``, a float32 exp of its
    own): within 2 float32 ulps of 1 / (1 + exp(-x)) in float64 where that is normal, 0 below
    exp's range, NaN kept, the same in place; the numpy path (no numba) gives the same bits."""
    from offload.runtime.kernels import approximations
    from offload.runtime.kernels.loops import sigmoid32

    rng = np.random.default_rng(13)
    x = np.concatenate(
        [
            rng.uniform(-90, 90, 20000),
            rng.standard_normal(20000) * 4,
            [0.0, -0.0, np.inf, -np.inf, np.nan, 88.7, -88.7, -87.0, -104.0, 1e-30],
        ]
    ).astype(np.float32)
    got = _one_pass_and_its_twin(monkeypatch, sigmoid32, approximations._sigmoid32, x)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = np.isfinite(x) & (want >= np.finfo(np.float32).tiny)
    np.testing.assert_array_max_ulp(got[normal], want[normal].astype(np.float32), maxulp=2)
    assert np.all(np.abs(got[~normal & ~np.isnan(x)] - want[~normal & ~np.isnan(x)]) < 1.2e-38)
    assert got[-10] == 0.5 and got[-8] == 1.0 and got[-7] == 0.0 and np.isnan(got[-6]) and got[-2] == 0.0


def test_float32_tanh_is_within_an_ulp_with_the_same_bits_without_numba(monkeypatch):
    """tanh of float32 values in one compiled pass (``loops.tanh32``: Cephes' polynomial below
    0.625, 1 - 2 / (exp(2|x|) + 1) above): within one float32 ulp of float64's tanh rounded,
    ±0 and tiny values kept, ±1 far out, NaN kept, the same in place; the numpy path (no numba)
    gives the same bits; the Tanh op's kernel and prepared call are it."""
    from offload.runtime.kernels import approximations
    from offload.runtime.kernels.elementwise import _tanh
    from offload.runtime.kernels.loops import tanh32

    rng = np.random.default_rng(15)
    x = np.concatenate(
        [
            rng.uniform(-12, 12, 20000),
            rng.standard_normal(20000) * 0.5,
            rng.uniform(-1e-3, 1e-3, 2000),
            [0.0, -0.0, np.inf, -np.inf, np.nan, 0.625, -0.625, 0.62499, 44.0, 1e-30, -1e-38],
        ]
    ).astype(np.float32)
    kernel = _tanh(x)
    got = _one_pass_and_its_twin(monkeypatch, tanh32, approximations._tanh32, x)
    np.testing.assert_array_equal(kernel.view(np.int32), got.view(np.int32))
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(x)
    np.testing.assert_array_max_ulp(got[finite], want[finite], maxulp=1)
    assert np.signbit(got[-10]) and got[-9] == 1.0 and got[-8] == -1.0 and np.isnan(got[-7])
    assert got[-2] == np.float32(1e-30) and got[-1] == np.float32(-1e-38)


def test_float32_exp_is_within_an_ulp_with_the_same_bits_without_numba(monkeypatch):
    """exp of float32 values in one compiled pass (``loops.exp32``, Softmax's exp): within one
    float32 ulp of the correctly rounded exp where that is normal, 0 below and inf above exp's
    float32 range, NaN kept, the same in place; the numpy path (no numba) gives the same bits."""
    from offload.runtime.kernels import approximations
    from offload.runtime.kernels.loops import exp32

    rng = np.random.default_rng(14)
    x = np.concatenate(
        [
            rng.uniform(-87, 88.7, 40000),
            rng.uniform(-1e-3, 1e-3, 2000),
            [0.0, -np.inf, np.inf, np.nan, -100.0, 89.0],
        ]
    ).astype(np.float32)
    got = _one_pass_and_its_twin(monkeypatch, exp32, approximations.exp32_into, x)
    want = np.exp(x.astype(np.float64))
    normal = np.isfinite(x) & (want >= np.finfo(np.float32).tiny) & (want <= np.finfo(np.float32).max)
    np.testing.assert_array_max_ulp(got[normal], want[normal].astype(np.float32), maxulp=1)
    assert got[-6] == 1.0 and got[-5] == 0.0 and got[-4] == np.inf and np.isnan(got[-3])
    assert got[-2] == 0.0 and got[-1] == np.inf


def test_float32_exp_in_place_on_a_transposed_array_reads_its_memory_in_order(monkeypatch):
    """``exp32_into(e, e)`` of a transposed view of a whole array (Softmax's shifted values of a
    transposed input) runs the compiled loop on the memory as it lies, without a copy: the same
    bits as the loop on a C-contiguous copy, and float64 numpy's exp within one float32 ulp; a
    view with a gap (every other row) still goes through a copy, with the same bits."""
    from offload.runtime.kernels import approximations

    if approximations.compiled_loops() is None:
        pytest.skip("numba is not installed: exp32_into is numpy's twin, any layout")
    rng = np.random.default_rng(15)
    base = rng.uniform(-20, 20, (2, 8, 16, 4)).astype(np.float32)
    calls = []
    loops = approximations.compiled_loops()

    class Recorded:  # the compiled loops, noting the arrays exp32 reads
        @staticmethod
        def exp32(a, o):
            calls.append(a)
            loops.exp32(a, o)

    monkeypatch.setattr(approximations, "compiled_loops", Recorded)
    for view, dense in (
        (base.copy().transpose(0, 3, 1, 2), True),
        (base.copy()[:, ::2].transpose(0, 3, 1, 2), False),
    ):
        want = np.ascontiguousarray(view)
        loops.exp32(want, want)
        before = view.copy()
        calls.clear()
        approximations.exp32_into(view, view)
        np.testing.assert_array_equal(view.view(np.int32), want.view(np.int32))
        assert (calls[0].base is not None and np.shares_memory(calls[0], view)) == dense
        np.testing.assert_array_max_ulp(view, np.exp(before.astype(np.float64)).astype(np.float32), maxulp=1)
