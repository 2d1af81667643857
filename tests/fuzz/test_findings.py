"""The guards the fuzzers' findings added, each checked at the layer that has it (the regression
inputs check them end to end; these pin the layer's own rule)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from offload.emit import evalues
from offload.errors import ModelFormatError, ShapeError, UnsupportedOpError
from offload.frontends.onnx import parse_model
from offload.ir import DataType, Operation, TensorType, Value, infer_op
from offload.ir.infer_dims import MAX_RANK
from offload.runtime.kernels.normalization import log_softmax, softmax
from offload.runtime.kernels.tensor import resize, tile
from offload.schemas.generated import onnx_pb2 as pb


def _op(op_type: str, *types) -> Operation:
    return Operation(op_type, [Value(f"x{i}", t) for i, t in enumerate(types)], output_names=["y"])


@pytest.mark.parametrize("length, rank", [(MAX_RANK, MAX_RANK), (MAX_RANK + 1, None), (1 << 31, None)])
def test_a_shape_input_too_long_for_a_rank_leaves_the_rank_unknown(length, rank):
    f, i64 = DataType.FLOAT, DataType.INT64
    for op in (
        _op("Reshape", TensorType(f, (2, 3)), TensorType(i64, (length,))),
        _op("Expand", TensorType(f, (3, 1)), TensorType(i64, (length,))),
        _op("ConstantOfShape", TensorType(i64, (length,))),
        _op("Unsqueeze", TensorType(f, ()), TensorType(i64, (length,))),
    ):
        (t,) = infer_op(op)
        assert t is not None and t.rank == rank, (op.op_type, t)


def test_the_pte_emitter_refuses_a_rank_its_dim_order_cannot_hold():
    assert evalues._tensor(DataType.FLOAT, (1,) * 255, "v", "value 'v'").dimOrder == list(range(255))
    with pytest.raises(UnsupportedOpError, match=r"value 'v': rank 256 does not fit a \.pte tensor"):
        evalues._tensor(DataType.FLOAT, (1,) * 256, "v", "value 'v'")


def test_a_name_that_is_not_utf8_is_a_format_error():
    model = pb.ModelProto(ir_version=8)
    model.graph.node.add(op_type="Relu", input=["x"], output=["y"])
    data = model.SerializeToString().replace(b"\x12\x01y", b"\x12\x01\xff")
    with pytest.raises(
        ModelFormatError, match=r"m.onnx: model.graph.node\[0\].output\[0\] b'\\xff' is not UTF-8"
    ):
        parse_model(data, "m.onnx")
    assert parse_model(model.SerializeToString(), "m.onnx").graph.node[0].output == ["y"]


def test_tile_refuses_a_result_past_the_limit_before_allocating():
    x = np.zeros((1, 2), np.float32)
    with pytest.raises(ShapeError, match=r"Tile: a result of shape \(1099511627776, 2\)"):
        tile(None, x, np.array([1 << 40, 1]))
    with pytest.raises(ShapeError, match="Tile: 1 repeats for an input of rank 2"):
        tile(None, x, np.array([3]))
    with pytest.raises(ShapeError, match="negative dimension"):
        tile(None, x, np.array([-1, 1]))
    assert tile(None, x, np.array([1 << 40, 0])).shape == (1 << 40, 0)
    np.testing.assert_array_equal(tile(None, np.arange(2), np.array([2])), [0, 1, 0, 1])


def test_resize_reads_one_scale_per_axis_and_refuses_more():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    attrs = dict(
        antialias=0,
        axes=None,
        coordinate_transformation_mode="asymmetric",
        cubic_coeff_a=-0.75,
        exclude_outside=0,
        extrapolation_value=0.0,
        keep_aspect_ratio_policy="stretch",
        mode="nearest",
        nearest_mode="floor",
    )
    scales = np.array([1, 1, 2, 2], np.float32)
    assert resize(None, x, None, scales, **attrs).shape == (1, 1, 4, 4)
    with pytest.raises(ShapeError, match=r"Resize: 1000000 scales values for 4 resized axes"):
        resize(None, x, None, np.ones(1_000_000, np.float32), **attrs)
    with pytest.raises(ShapeError, match=r"Resize: 3 sizes values for 4 resized axes"):
        resize(None, x, None, None, np.array([1, 1, 4]), **attrs)


def test_softmax_of_an_empty_tensor_allocates_nothing():
    x = np.empty(((1 << 31) - 1, 0), np.float32)
    for kernel in (softmax, log_softmax):
        y = kernel(SimpleNamespace(out=lambda i: None), x, axis=1)
        assert y.shape == x.shape and y.dtype == np.float32
