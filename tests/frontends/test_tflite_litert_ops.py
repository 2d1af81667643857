"""TFLite operators and file forms that real models use and LiteRT runs by default: PRELU,
MediaPipe's ``Convolution2DTransposeBias`` custom operator, an empty tensor that no buffer and no
operator fills, an int8 resource variable. Each model is built by hand (tests/frontends/tflite/build.py) and run by LiteRT
live, the reference; offload runs it with ``evaluate``, from a ``.pte``, and delegated to opencl."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import offload
from offload import runtime
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.ReshapeOptions import ReshapeOptionsStart
from offload.schemas.generated.tflite.TensorType import TensorType
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import check

Interpreter = pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference").Interpreter

RNG = np.random.default_rng(20261127)


def prelu_model(x_shape, alpha: np.ndarray, y_shape) -> bytes:
    tensors = [T("x", list(x_shape)), T("alpha", list(alpha.shape), data=alpha), T("y", list(y_shape))]
    return build([Graph(tensors, [Op(BuiltinOperator.PRELU, [0, 1], [2])], [0], [2])])


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_prelu_with_a_per_channel_alpha(backend, tmp_path):
    alpha = RNG.uniform(-0.5, 0.5, (1, 1, 3)).astype(np.float32)
    data = prelu_model((1, 4, 5, 3), alpha, (1, 4, 5, 3))
    x = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    x[0, 0, 0] = [0.0, -0.0, 1.0]
    check(data, {"x": x}, tmp_path, backend=backend)
    assert [op.op_type for op in offload.load(data).main.body.operations] == ["PRelu"]


def test_prelu_broadcasts_both_ways_as_litert_does(tmp_path):
    alpha = RNG.uniform(-1, 1, (1, 4, 1)).astype(np.float32)
    data = prelu_model((2, 1, 3), alpha, (2, 4, 3))
    check(data, {"x": RNG.standard_normal((2, 1, 3)).astype(np.float32)}, tmp_path)


def transpose_conv_bias_model(padding: int, strides: tuple[int, int], out_shape) -> bytes:
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)  # OHWI
    b = RNG.standard_normal(2).astype(np.float32)
    options = struct.pack("<iii", padding, strides[1], strides[0])  # padding, stride w, stride h
    tensors = [T("x", [1, 4, 5, 3]), T("w", [2, 3, 3, 3], data=w), T("b", [2], data=b), T("y", out_shape)]
    op = Op("Convolution2DTransposeBias", [0, 1, 2], [3], custom_options=options)
    return build([Graph(tensors, [op], [0], [3])])


@pytest.mark.parametrize(
    "padding, strides, out_shape",
    [(1, (2, 2), [1, 8, 10, 2]), (2, (2, 2), [1, 9, 11, 2]), (1, (1, 2), [1, 4, 10, 2])],
    ids=["same", "valid", "same_h1_w2"],
)
def test_mediapipes_transposed_conv_with_bias(padding, strides, out_shape, tmp_path):
    data = transpose_conv_bias_model(padding, strides, out_shape)
    x = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    check(data, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5)


@needs_opencl
def test_mediapipes_transposed_conv_with_bias_on_opencl(tmp_path):
    data = transpose_conv_bias_model(1, (2, 2), [1, 8, 10, 2])
    x = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    check(data, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5, backend="opencl")


def test_bad_options_of_the_transposed_conv_are_named():
    data = build(
        [
            Graph(
                [T("x", [1, 4, 5, 3]), T("w", [2, 3, 3, 3], data=np.ones((2, 3, 3, 3), np.float32))]
                + [T("b", [2], data=np.ones(2, np.float32)), T("y", [1, 8, 10, 2])],
                [
                    Op(
                        "Convolution2DTransposeBias",
                        [0, 1, 2],
                        [3],
                        custom_options=struct.pack("<iii", 7, 2, 2),
                    )
                ],
                [0],
                [3],
            )
        ]
    )
    with pytest.raises(offload.errors.ModelFormatError, match=r"Convolution2DTransposeBias.*padding 7"):
        offload.load(data)


def _reshape_options(b):
    from offload.schemas.generated.tflite.BuiltinOptions import BuiltinOptions
    from offload.schemas.generated.tflite.ReshapeOptions import ReshapeOptionsEnd

    ReshapeOptionsStart(b)
    return BuiltinOptions.ReshapeOptions, ReshapeOptionsEnd(b)


def test_an_empty_tensor_without_a_buffer_is_an_empty_constant(tmp_path):
    """A RESHAPE to a scalar whose shape input is an int32 [0] tensor with no buffer: LiteRT reads
    it as an empty shape."""
    tensors = [T("x", [1, 1]), T("shape", [0], type=TensorType.INT32), T("y", [])]
    op = Op(BuiltinOperator.RESHAPE, [0, 1], [2], options=_reshape_options)
    data = build([Graph(tensors, [op], [0], [2])])
    check(data, {"x": np.array([[2.5]], np.float32)}, tmp_path)


def test_an_int8_variable_keeps_its_scale_across_calls():
    """A streaming model's int8 state in a resource variable (microWakeWord's layers keep their
    frames so): read as int8 with a scale, dequantized, added to the input, quantized back with
    the same scale and assigned; the state carries its scale, and over three calls the outputs
    follow LiteRT's."""
    from tests.frontends.tflite.build import _call_once, _var_handle

    scale, zero = 0.05, -128
    main = Graph(
        [
            T("x", [1, 4]),
            T("handle", [], TensorType.RESOURCE),
            T("read", [1, 4], TensorType.INT8, quant=(scale, zero)),
            T("state", [1, 4]),
            T("sum", [1, 4]),
            T("stored", [1, 4], TensorType.INT8, quant=(scale, zero)),
        ],
        [
            Op(BuiltinOperator.CALL_ONCE, [], [], _call_once(1)),
            Op(BuiltinOperator.VAR_HANDLE, [], [1], _var_handle("frames")),
            Op(BuiltinOperator.READ_VARIABLE, [1], [2]),
            Op(BuiltinOperator.DEQUANTIZE, [2], [3]),
            Op(BuiltinOperator.ADD, [3, 0], [4]),
            Op(BuiltinOperator.QUANTIZE, [4], [5]),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [1, 5], []),
        ],
        [0],
        [4],
    )
    init = Graph(
        [
            T("h", [], TensorType.RESOURCE),
            T("zeros", [1, 4], TensorType.INT8, data=np.full((1, 4), zero, np.int8), quant=(scale, zero)),
        ],
        [
            Op(BuiltinOperator.VAR_HANDLE, [], [0], _var_handle("frames")),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [0, 1], []),
        ],
        [],
        [],
    )
    data = build([main, init])
    interp = Interpreter(model_content=data)
    interp.allocate_tensors()
    (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
    program = offload.load(data)
    (state_type,) = [
        v.type for v in program.main.inputs if v.name in program.main.states and v.type.dtype.name == "INT8"
    ]
    assert state_type.quant is not None and float(state_type.quant.scale[0]) == pytest.approx(scale)
    module = runtime.load(offload.save(program))
    for step in range(3):
        x = np.array([[0.1, 0.27, -0.3, 1.0]], np.float32) * (step + 1)
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        want = interp.get_tensor(out["index"])
        (got,) = module.run({inp["name"]: x}).values()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_prelu_after_another_operator_is_one_prelu(tmp_path):
    """The rule reads the shapes the file records (an operator's input made by another operator
    has no type yet while the graph is read)."""
    alpha = RNG.uniform(-0.5, 0.5, (1, 1, 3)).astype(np.float32)
    c = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    tensors = [T("x", [1, 4, 5, 3]), T("c", [1, 4, 5, 3], data=c), T("s", [1, 4, 5, 3])]
    tensors += [T("alpha", [1, 1, 3], data=alpha), T("y", [1, 4, 5, 3])]
    ops = [Op(BuiltinOperator.ADD, [0, 1], [2]), Op(BuiltinOperator.PRELU, [2, 3], [4])]
    data = build([Graph(tensors, ops, [0], [4])])
    check(data, {"x": RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)}, tmp_path)
    assert [op.op_type for op in offload.load(data).main.body.operations] == ["Add", "PRelu"]


def test_outputs_keep_the_files_names_where_an_added_op_would_take_them(tmp_path):
    """The first ADD's unnamed result is named after its op ("Add"), which is also the name
    the file gives the output: the output keeps it, as LiteRT lists it."""
    c = RNG.standard_normal((2, 3)).astype(np.float32)
    tensors = [T("x", [2, 3]), T("c", [2, 3], data=c), T("", [2, 3]), T("Add", [2, 3])]
    ops = [Op(BuiltinOperator.ADD, [0, 1], [2]), Op(BuiltinOperator.ADD, [2, 1], [3])]
    data = build([Graph(tensors, ops, [0], [3])])
    check(data, {"x": RNG.standard_normal((2, 3)).astype(np.float32)}, tmp_path)
    assert [v.name for v in offload.load(data).main.outputs] == ["Add"]
    names = [d["name"] for d in Interpreter(model_content=data).get_output_details()]
    assert names == ["Add"]
