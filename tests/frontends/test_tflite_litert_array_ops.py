"""TFLite operators that move, pick and scatter elements (frontends/tflite_array_ops.py), each in a
hand-built one-operator model run by LiteRT live as the reference; offload runs it with
``evaluate`` and from a ``.pte``."""

from __future__ import annotations

import numpy as np
import pytest

from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from offload.schemas.generated.tflite.TensorType import TensorType as TT
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import T
from tests.frontends.tflite.litert import check, one_op, options

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")

RNG = np.random.default_rng(20261128)
I32, I64, BOOL = TT.INT32, TT.INT64, TT.BOOL


def floats(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("axis, ttype", [(1, TT.FLOAT32), (-3, TT.INT32), (2, TT.FLOAT32)])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_unpack(axis, ttype, backend, tmp_path):
    shape = [2, 3, 4]
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    n = shape[axis]
    out = [d for i, d in enumerate(shape) if i != axis % 3]
    data = one_op(
        B.UNPACK,
        [T("x", shape, ttype)],
        [T(f"y{i}", out, ttype) for i in range(n)],
        options("UnpackOptions", num=n, axis=axis),
    )
    check(data, {"x": (floats(*shape) * 10).astype(dtype)}, tmp_path, backend=backend)


@pytest.mark.parametrize(
    "shape, block, pads",
    [
        ([1, 5, 6, 2], [2, 3], [[1, 0], [0, 0]]),
        ([2, 4, 4, 3], [2, 2], [[0, 0], [0, 0]]),
        ([2, 5, 3], [3], [[0, 1]]),
    ],
    ids=["4d_padded", "4d", "3d"],
)
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_space_to_batch_and_back(shape, block, pads, backend, tmp_path):
    block_a = np.array(block, np.int32)
    pads_a = np.array(pads, np.int32)
    padded = [s + sum(p) for s, p in zip(shape[1:], pads)]
    out = [shape[0] * int(np.prod(block)), *[p // b for p, b in zip(padded, block)], *shape[1 + len(block) :]]
    data = one_op(
        B.SPACE_TO_BATCH_ND,
        [T("x", shape), T("block", [len(block)], I32, block_a), T("pads", [len(block), 2], I32, pads_a)],
        [T("y", out)],
        options("SpaceToBatchNDOptions"),
    )
    x = floats(*shape)
    check(data, {"x": x}, tmp_path, backend=backend)
    data = one_op(
        B.BATCH_TO_SPACE_ND,
        [T("x", out), T("block", [len(block)], I32, block_a), T("crops", [len(block), 2], I32, pads_a)],
        [T("y", shape)],
        options("BatchToSpaceNDOptions"),
    )
    check(data, {"x": floats(*out)}, tmp_path, backend=backend)


@pytest.mark.parametrize("axis, vtype", [(-1, TT.FLOAT32), (0, TT.INT32), (1, TT.FLOAT32)])
def test_one_hot_gives_negative_and_large_indices_an_off_row(axis, vtype, tmp_path):
    dtype = np.float32 if vtype == TT.FLOAT32 else np.int32
    depth = 4
    shape = [2, 3]
    out = list(shape)
    out.insert(axis % 3, depth)
    data = one_op(
        B.ONE_HOT,
        [
            T("i", shape, I32),
            T("depth", [], I32, np.array(depth, np.int32)),
            T("on", [], vtype, np.array(5, dtype)),
            T("off", [], vtype, np.array(-2, dtype)),
        ],
        [T("y", out, vtype)],
        options("OneHotOptions", axis=axis),
    )
    check(data, {"i": np.array([[0, 3, -1], [4, 2, -4]], np.int32)}, tmp_path)


@pytest.mark.parametrize("ttype", [BOOL, TT.FLOAT32, TT.INT32])
def test_where_lists_the_coordinates_of_true_elements(ttype, tmp_path):
    x = RNG.integers(0, 2, (3, 4))
    x = x.astype(bool) if ttype == BOOL else x.astype(np.float32 if ttype == TT.FLOAT32 else np.int32)
    data = one_op(B.WHERE, [T("x", [3, 4], ttype)], [T("y", [0, 2], I64, signature=[-1, 2])])
    check(data, {"x": x}, tmp_path)


def test_rank(tmp_path):
    data = one_op(B.RANK, [T("x", [2, 1, 3])], [T("y", [], I32)], options("RankOptions"))
    check(data, {"x": floats(2, 1, 3)}, tmp_path)


@pytest.mark.parametrize("ttype", [I32, I64])
def test_broadcast_args(ttype, tmp_path):
    dtype = np.int32 if ttype == I32 else np.int64
    data = one_op(B.BROADCAST_ARGS, [T("a", [2], ttype), T("b", [4], ttype)], [T("y", [4], ttype)])
    check(data, {"a": np.array([1, 5], dtype), "b": np.array([2, 3, 0, 1], dtype)}, tmp_path)


@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_scatter_nd_adds_repeated_indices(ttype, backend, tmp_path):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    indices = np.array([[1], [3], [1]], np.int32)
    data = one_op(
        B.SCATTER_ND,
        [
            T("i", [3, 1], I32, indices),
            T("u", [3, 2], ttype),
            T("shape", [2], I32, np.array([5, 2], np.int32)),
        ],
        [T("y", [5, 2], ttype)],
        options("ScatterNdOptions"),
    )
    check(data, {"u": (floats(3, 2) * 10).astype(dtype)}, tmp_path, backend=backend)


@pytest.mark.parametrize("start", [[1, 2], [-3, 1], [9, 9]], ids=["inside", "negative", "past_the_end"])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_dynamic_update_slice_clamps_the_start(start, backend, tmp_path):
    data = one_op(
        B.DYNAMIC_UPDATE_SLICE,
        [T("x", [4, 5]), T("u", [2, 3]), T("start", [2], I32)],
        [T("y", [4, 5])],
        options("DynamicUpdateSliceOptions"),
    )
    check(
        data,
        {"x": floats(4, 5), "u": floats(2, 3), "start": np.array(start, np.int32)},
        tmp_path,
        backend=backend,
    )


def test_embedding_lookup(tmp_path):
    table = floats(6, 3)
    data = one_op(B.EMBEDDING_LOOKUP, [T("ids", [4], I32), T("w", [6, 3], data=table)], [T("y", [4, 3])])
    check(data, {"ids": np.array([5, 0, 2, 2], np.int32)}, tmp_path)


@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
def test_segment_sum(ttype, tmp_path):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    data = one_op(
        B.SEGMENT_SUM,
        [T("x", [5, 2], ttype), T("ids", [5], I32)],
        [T("y", [1, 2], ttype, signature=[-1, 2])],
        options("SegmentSumOptions"),
    )
    x = (floats(5, 2) * 10).astype(dtype)
    check(data, {"x": x, "ids": np.array([0, 0, 1, 2, 2], np.int32)}, tmp_path)  # LiteRT: ids step by 0 or 1


@pytest.mark.parametrize("code", ["SUM", "PROD", "MAX", "MIN"])
@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
def test_unsorted_segment_reductions_skip_negative_ids_and_leave_empty_segments_at_the_identity(
    code, ttype, tmp_path
):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    name = f"UNSORTED_SEGMENT_{code}"
    table = f"UnsortedSegment{code.capitalize()}Options"
    data = one_op(
        getattr(B, name),
        [T("x", [3, 2, 2], ttype), T("ids", [3, 2], I32), T("n", [1], I32, np.array([4], np.int32))],
        [T("y", [4, 2], ttype)],
        options(table),
    )
    x = (floats(3, 2, 2) * 5).astype(dtype)
    check(data, {"x": x, "ids": np.array([[0, 2], [2, -1], [3, 0]], np.int32)}, tmp_path, rtol=1e-5)


@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
def test_matrix_diag(ttype, tmp_path):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    data = one_op(
        B.MATRIX_DIAG, [T("x", [2, 3], ttype)], [T("y", [2, 3, 3], ttype)], options("MatrixDiagOptions")
    )
    check(data, {"x": (floats(2, 3) * 10).astype(dtype)}, tmp_path)


@pytest.mark.parametrize("shape", [[2, 3, 4], [4, 2]], ids=["wide", "tall"])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_matrix_set_diag(shape, backend, tmp_path):
    k = min(shape[-2:])
    diag = [*shape[:-2], k]
    data = one_op(
        B.MATRIX_SET_DIAG, [T("x", shape), T("d", diag)], [T("y", shape)], options("MatrixSetDiagOptions")
    )
    check(data, {"x": floats(*shape), "d": floats(*diag)}, tmp_path, backend=backend)


@pytest.mark.parametrize("seq_dim, batch_dim", [(1, 0), (0, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_reverse_sequence(seq_dim, batch_dim, backend, tmp_path):
    shape = [3, 4, 3]
    data = one_op(
        B.REVERSE_SEQUENCE,
        [T("x", shape), T("n", [shape[batch_dim]], I32)],
        [T("y", shape)],
        options("ReverseSequenceOptions", seq_dim=seq_dim, batch_dim=batch_dim),
    )
    lengths = np.array([0, shape[seq_dim], 2, 1][: shape[batch_dim]], np.int32)
    check(data, {"x": floats(*shape), "n": lengths}, tmp_path, backend=backend)


@pytest.mark.parametrize(
    "indices, values, shape",
    [
        (np.array([[0, 1], [2, 3], [1, 0]], np.int32), np.array([1.5, -2.0, 3.0], np.float32), [3, 4]),
        (np.array([4, 0, 2], np.int32), np.array([7.0, 8.0, 9.0], np.float32), [6]),
        (np.array([[1, 1], [0, 2]], np.int64), np.array(4.0, np.float32), [2, 3]),
    ],
    ids=["2d", "1d", "scalar_value"],
)
def test_sparse_to_dense(indices, values, shape, tmp_path):
    itype = I64 if indices.dtype == np.int64 else I32
    data = one_op(
        B.SPARSE_TO_DENSE,
        [
            T("i", list(indices.shape), itype, indices),
            T("shape", [len(shape)], I32, np.array(shape, np.int32)),
            T("v", list(values.shape)),
            T("d", [], data=np.array(-1.0, np.float32)),
        ],
        [T("y", shape)],
        options("SparseToDenseOptions", validate_indices=False),
    )
    check(data, {"v": values}, tmp_path)


@pytest.mark.parametrize("ttype, out", [(TT.FLOAT32, I32), (I32, I64)])
def test_unique_keeps_first_appearance_order(ttype, out, tmp_path):
    x = np.array([3, 1, 3, 7, 1, 0, 7, 7], np.float32 if ttype == TT.FLOAT32 else np.int32)
    data = one_op(
        B.UNIQUE,
        [T("x", [8], ttype)],
        [T("y", [0], ttype, signature=[-1]), T("idx", [8], out)],
        options("UniqueOptions", idx_out_type=out),
    )
    check(data, {"x": x}, tmp_path)


@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
def test_bucketize(ttype, tmp_path):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    boundaries = np.array([-2.0, 0.0, 0.5, 3.0], np.float32)
    x = np.array([-5, -2, -1, 0, 0.5, 0.25, 3, 10, np.nan if ttype == TT.FLOAT32 else 1], np.float64)
    data = one_op(
        B.BUCKETIZE,
        [T("x", [9], ttype)],
        [T("y", [9], I32)],
        options("BucketizeOptions", boundaries=boundaries),
    )
    check(data, {"x": x.astype(dtype)}, tmp_path)


@pytest.mark.parametrize("ttype", [TT.FLOAT32, I32])
def test_dilate(ttype, tmp_path):
    dtype = np.float32 if ttype == TT.FLOAT32 else np.int32
    data = one_op(
        B.DILATE,
        [T("x", [2, 3, 4], ttype), T("d", [3], I32, np.array([3, 1, 2], np.int32)), T("p", [], ttype)],
        [T("y", [4, 3, 7], ttype)],
    )
    check(data, {"x": (floats(2, 3, 4) * 10).astype(dtype), "p": np.array(-7, dtype)}, tmp_path)


def test_int8_data_movement_keeps_scales_and_pads_with_the_zero_point(tmp_path):
    """int8 tensors with a scale: the float rules run between DequantizeLinear and
    QuantizeLinear, exact for moves (SPACE_TO_BATCH_ND pads with the zero point)."""
    q = (0.05, -3)
    x = RNG.integers(-128, 128, (1, 3, 4, 2)).astype(np.int8)
    block, pads = np.array([2, 2], np.int32), np.array([[1, 0], [0, 2]], np.int32)
    data = one_op(
        B.SPACE_TO_BATCH_ND,
        [T("x", [1, 3, 4, 2], TT.INT8, quant=q), T("b", [2], I32, block), T("p", [2, 2], I32, pads)],
        [T("y", [4, 2, 3, 2], TT.INT8, quant=q)],
        options("SpaceToBatchNDOptions"),
    )
    check(data, {"x": x}, tmp_path, rtol=0, atol=0)
    data = one_op(
        B.UNPACK,
        [T("x", [1, 3, 4, 2], TT.INT8, quant=q)],
        [T(f"y{i}", [1, 3, 2], TT.INT8, quant=q) for i in range(4)],
        options("UnpackOptions", num=4, axis=2),
    )
    check(data, {"x": x}, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize(
    "low, high, interior",
    [
        ([1, 0, 2], [0, 3, 1], [0, 0, 0]),
        ([0, 1, -1], [2, -2, 0], [1, 0, 2]),
        ([-1, 0, 0], [0, 0, -3], [2, 1, 0]),
    ],
    ids=["edges", "interior_and_cuts", "cuts_after_interior"],
)
def test_stablehlo_pad(low, high, interior, tmp_path):
    from offload.schemas.generated.tflite.BuiltinOptions2 import BuiltinOptions2

    shape = [2, 3, 4]
    out = [(n - 1) * (i + 1) + 1 + lo + hi for n, lo, hi, i in zip(shape, low, high, interior)]
    opts = options(
        "StablehloPadOptions",
        BuiltinOptions2,
        edge_padding_low=np.array(low, np.int64),
        edge_padding_high=np.array(high, np.int64),
        interior_padding=np.array(interior, np.int64),
    )
    data = one_op(B.STABLEHLO_PAD, [T("x", shape), T("p", [])], [T("y", out)], opts_2=opts)
    check(data, {"x": floats(*shape), "p": np.array(9.5, np.float32)}, tmp_path)


@pytest.mark.parametrize("combiner", [0, 1, 2], ids=["sum", "mean", "sqrtn"])
def test_embedding_lookup_sparse(combiner, tmp_path):
    table = floats(5, 3)
    ids = np.array([0, 3, 1, 4, 4, 2], np.int32)
    indices = np.array([[0, 0], [0, 1], [2, 0], [2, 1], [2, 2], [3, 0]], np.int32)  # row 1 empty
    data = one_op(
        B.EMBEDDING_LOOKUP_SPARSE,
        [
            T("ids", [6], I32),
            T("indices", [6, 2], I32, indices),
            T("shape", [2], I32, np.array([4, 3], np.int32)),
            T("w", [6]),
            T("table", [5, 3], data=table),
        ],
        [T("y", [4, 3])],
        options("EmbeddingLookupSparseOptions", combiner=combiner),
    )
    check(data, {"ids": ids, "w": RNG.uniform(0.5, 2, 6).astype(np.float32)}, tmp_path, rtol=1e-5)


def test_embedding_lookup_of_an_int8_table_gives_float_rows(tmp_path):
    """A hybrid lookup: int8 table with a scale, float32 output (LiteRT dequantizes the rows)."""
    table = RNG.integers(-127, 128, (6, 4)).astype(np.int8)
    data = one_op(
        B.EMBEDDING_LOOKUP,
        [T("ids", [3], I32), T("w", [6, 4], TT.INT8, table, quant=(0.02, 0))],
        [T("y", [3, 4])],
    )
    check(data, {"ids": np.array([5, 0, 5], np.int32)}, tmp_path)


def test_one_hot_with_int64_indices_and_bool_values(tmp_path):
    data = one_op(
        B.ONE_HOT,
        [
            T("i", [5], I64),
            T("depth", [], I32, np.array(3, np.int32)),
            T("on", [], BOOL, np.array(True)),
            T("off", [], BOOL, np.array(False)),
        ],
        [T("y", [5, 3], BOOL)],
        options("OneHotOptions", axis=-1),
    )
    check(data, {"i": np.array([2, -1, 0, 3, 1], np.int64)}, tmp_path)
