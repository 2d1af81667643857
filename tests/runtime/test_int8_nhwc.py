"""int8 TFLite convolutions that read their NHWC input in place (runtime/int8_fusions.py,
runtime/kernels/tflite_int8_nhwc.py): hand-built int8 models (a streaming layer's depthwise
window, a strided padded depthwise conv, a first layer whose one window is its whole input)
against LiteRT, bit for bit against ``offload.evaluate``'s kernels, and the fused step taken."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.runtime.kernels.tflite_int8_nhwc import _Int8NHWCConvCall
from offload.runtime.steps import _FusedAway, _PreparedStep
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.TensorType import TensorType
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import litert, options

RNG = np.random.default_rng(20261128)
X_Q, W_SCALE, Y_Q = (0.05, -3), 0.01, (0.2, 5)


def _int8(name, shape, data=None, quant=X_Q):
    return T(name, list(shape), TensorType.INT8, data=data, quant=quant)


def _conv_model(x_shape, w_shape, y_shape, depthwise: bool, padding=Padding.VALID, stride=1) -> bytes:
    """y = CONV_2D or DEPTHWISE_CONV_2D(x, w, b) of int8 x (NHWC) and constant per-tensor int8
    weights and int32 bias, then a second, identical layer's input: only the conv."""
    w = RNG.integers(-127, 128, w_shape).astype(np.int8)
    b = RNG.integers(-2000, 2000, w_shape[0] if not depthwise else w_shape[3]).astype(np.int32)
    tensors = [
        _int8("x", x_shape),
        _int8("w", w_shape, w, (W_SCALE, 0)),
        T("b", [len(b)], TensorType.INT32, data=b, quant=(X_Q[0] * W_SCALE, 0)),
        _int8("y", y_shape, quant=Y_Q),
    ]
    fields = dict(padding=padding, stride_h=stride, stride_w=stride)
    if depthwise:
        code, opts = (
            BuiltinOperator.DEPTHWISE_CONV_2D,
            options("DepthwiseConv2DOptions", depth_multiplier=1, **fields),
        )
    else:
        code, opts = BuiltinOperator.CONV_2D, options("Conv2DOptions", **fields)
    return build([Graph(tensors, [Op(code, [0, 1, 2], [3], opts, version=3)], [0], [3])])


CASES = {
    # (x NHWC, w, y NHWC, depthwise, padding, stride, the fused call's kind)
    "streaming depthwise window": ((1, 21, 1, 16), (1, 21, 1, 16), (1, 1, 1, 16), True, Padding.VALID, 1, "depthwise"),
    "strided padded depthwise": ((1, 9, 7, 8), (1, 3, 3, 8), (1, 5, 4, 8), True, Padding.SAME, 2, "depthwise"),
    "first layer, one window": ((1, 5, 1, 40), (12, 5, 1, 40), (1, 1, 1, 12), False, Padding.VALID, 1, "product"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_an_nhwc_int8_conv_reads_its_input_in_place_and_matches_litert(case, conv_loops):
    x_shape, w_shape, y_shape, depthwise, padding, stride, kind = CASES[case]
    data = _conv_model(x_shape, w_shape, y_shape, depthwise, padding, stride)
    program = offload.load(data)
    method = offload.runtime.load(offload.save(offload.optimize(program))).method("forward")
    fused = [s for s in method._steps if type(s) is _PreparedStep and type(s.call) is _Int8NHWCConvCall]
    if conv_loops == "compiled":
        assert [s.call.kind for s in fused] == [kind]
        assert any(
            type(s) is _FusedAway and s.kernel.op_name == "offload.tflite::Conv" for s in method._steps
        )
    else:  # no compiled loops: the Transpose and the conv's own calls
        assert fused == []
    for _ in range(3):  # new values each run, into the same bound arrays
        x = RNG.integers(-128, 128, x_shape).astype(np.int8)
        want = litert(data, {"x": x})["y"]
        got = method.run({"x": x})["y"]
        assert len(np.unique(want)) > 4  # neither saturated nor constant
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])  # the kernels' bits
        assert np.abs(got.astype(np.int64) - want).max() <= 1  # LiteRT rounds a few values one unit apart


def test_a_transpose_read_by_another_op_too_is_not_fused():
    """The NHWC → NCHW Transpose's result read by the conv and also a result of the method: the
    Transpose runs and the conv takes its own calls; the same two steps otherwise fuse."""
    from offload.runtime.int8_fusions import _fuse_nhwc_int8_convs

    data = _conv_model((1, 5, 1, 8), (1, 5, 1, 8), (1, 1, 1, 8), True)
    method = offload.runtime.load(offload.save(offload.optimize(offload.load(data)))).method("forward")
    (pc,) = [
        i
        for i, s in enumerate(method._steps)
        if type(s) is _PreparedStep and type(s.call) is _Int8NHWCConvCall
    ]
    fused = method._steps[pc]
    transpose, conv = fused.kernel.kernels
    for also_a_result in (False, True):
        steps = list(method._steps)
        steps[pc], steps[pc + 1] = _PreparedStep(), _PreparedStep()  # the two steps as prepared before
        for step, k, call in zip(steps[pc : pc + 2], (transpose, conv), (None, fused.call.conv)):
            step.kernel, step.in_slots, step.out_slot, step.call = k, list(k.in_slots), k.out_slots[0], call
        if also_a_result:
            method._output_slots.append(transpose.out_slots[0])
        try:
            _fuse_nhwc_int8_convs(method, steps)
        finally:
            if also_a_result:
                method._output_slots.pop()
        kinds = [type(s.call) for s in steps if type(s) is _PreparedStep]
        assert (_Int8NHWCConvCall in kinds) == (not also_a_result)
