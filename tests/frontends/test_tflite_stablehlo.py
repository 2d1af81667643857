"""TFLite's StableHLO operators of frontends/tflite_stablehlo.py (COMPOSITE, CASE, GATHER,
SCATTER, REDUCE_WINDOW, SHIFT_LEFT) and the builtin REDUCE_WINDOW in hand-built models run by LiteRT live as the reference;
offload runs each with ``evaluate`` and from a ``.pte`` (one on opencl too)."""

from __future__ import annotations

import numpy as np
import pytest
from flatbuffers import flexbuffers

import offload
from offload.errors import ModelFormatError, UnsupportedOpError
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator as B
from offload.schemas.generated.tflite.BuiltinOptions2 import BuiltinOptions2
from offload.schemas.generated.tflite.ReduceWindowFunction import ReduceWindowFunction as RWF
from offload.schemas.generated.tflite.RngAlgorithm import RngAlgorithm
from offload.schemas.generated.tflite.TensorType import TensorType as TT
from tests.delegates.opencl_support import needs_opencl
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import check, one_op, options

pytest.importorskip("ai_edge_litert.interpreter", reason="LiteRT is the reference")

RNG = np.random.default_rng(20261128)
F32, I32 = TT.FLOAT32, TT.INT32


def floats(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def composite(index: int, name: str = "odml.rms_norm"):
    """Options of a composite named ``name`` with attributes {"epsilon": 1e-6} (a flexbuffer map,
    which LiteRT requires and which does not change what it computes)."""
    return options(
        "StableHLOCompositeOptions",
        BuiltinOptions2,
        name=name,
        decomposition_subgraph_index=index,
        composite_attributes=np.frombuffer(flexbuffers.Dumps({"epsilon": 1e-6}), np.uint8),
        version=0,
    )


def rms_norm_graph(n: int) -> Graph:
    """(x [2, n], w [n]) → x · rsqrt(mean(x²) + 1e-6) · w, as ai-edge-torch decomposes rms_norm."""
    tensors = [
        T("x", [2, n]),
        T("w", [n]),
        T("axes", [1], I32, np.array([-1], np.int32)),
        T("eps", [], F32, np.array(1e-6, np.float32)),
        T("sq", [2, n]),
        T("mean", [2, 1]),
        T("shifted", [2, 1]),
        T("r", [2, 1]),
        T("normed", [2, n]),
        T("y", [2, n]),
    ]
    keep = options("ReducerOptions", keep_dims=True)
    ops = [
        Op(B.MUL, [0, 0], [4], options("MulOptions")),
        Op(B.MEAN, [4, 2], [5], keep),
        Op(B.ADD, [5, 3], [6], options("AddOptions")),
        Op(B.RSQRT, [6], [7]),
        Op(B.MUL, [0, 7], [8], options("MulOptions")),
        Op(B.MUL, [8, 1], [9], options("MulOptions")),
    ]
    return Graph(tensors, ops, [0, 1], [9])


def test_composite_rms_norm_used_twice_runs_its_decomposition(tmp_path):
    n = 8
    w = (1 + floats(n) / 4).astype(np.float32)
    main = Graph(
        [T("x", [2, n]), T("w", [n], F32, w), T("h", [2, n]), T("y", [2, n])],
        [
            Op(B.STABLEHLO_COMPOSITE, [0, 1], [2], options_2=composite(1)),
            Op(B.STABLEHLO_COMPOSITE, [2, 1], [3], options_2=composite(1)),
        ],
        [0],
        [3],
    )
    data = build([main, rms_norm_graph(n)])
    ops = [op.op_type for op in offload.load(data).main.body.walk()]
    assert ops.count("ReduceMean") == 2  # the decomposition inlined at each use
    check(data, {"x": floats(2, n)}, tmp_path, rtol=1e-5, atol=1e-6)


def nested_model() -> bytes:
    """subgraph 0: y = COMPOSITE₁(x); 1: t = COMPOSITE₂(x), y = t - x; 2: y = x · x + x."""
    main = Graph(
        [T("x", [3, 4]), T("y", [3, 4])],
        [Op(B.STABLEHLO_COMPOSITE, [0], [1], options_2=composite(1, "outer"))],
        [0],
        [1],
    )
    outer = Graph(
        [T("x", [3, 4]), T("t", [3, 4]), T("y", [3, 4])],
        [
            Op(B.STABLEHLO_COMPOSITE, [0], [1], options_2=composite(2, "inner")),
            Op(B.SUB, [1, 0], [2], options("SubOptions")),
        ],
        [0],
        [2],
    )
    inner = Graph(
        [T("x", [3, 4]), T("sq", [3, 4]), T("y", [3, 4])],
        [Op(B.MUL, [0, 0], [1], options("MulOptions")), Op(B.ADD, [1, 0], [2], options("AddOptions"))],
        [0],
        [2],
    )
    return build([main, outer, inner])


@pytest.mark.parametrize("backend", [None, pytest.param("opencl", marks=needs_opencl)])
def test_nested_composites_inline_both_levels(backend, tmp_path):
    check(nested_model(), {"x": floats(3, 4)}, tmp_path, backend=backend)


def test_a_composite_in_every_layer_is_not_taken_for_runaway_calls(tmp_path):
    """24 composites calling one decomposition: more calls than 8× the subgraphs, each one site."""
    layers = 24
    tensors = [T(f"h{k}", [4]) for k in range(layers + 1)]
    ops = [
        Op(B.STABLEHLO_COMPOSITE, [k], [k + 1], options_2=composite(1, "odml.layer")) for k in range(layers)
    ]
    layer = Graph(
        [T("x", [4]), T("c", [], F32, np.array(0.5, np.float32)), T("y", [4])],
        [Op(B.MUL, [0, 1], [2], options("MulOptions"))],
        [0],
        [2],
    )
    data = build([Graph(tensors, ops, [0], [layers]), layer])
    check(data, {"h0": floats(4)}, tmp_path, rtol=0, atol=0)


def test_composite_passes_int8_values_as_stored(tmp_path):
    """An int8 decomposition (ADD with scales): its operands go in quantized, as its tensors say."""
    tensors = [T("x", [6], TT.INT8, quant=(0.05, 3)), T("y", [6], TT.INT8, quant=(0.1, -2))]
    main = Graph(tensors, [Op(B.STABLEHLO_COMPOSITE, [0], [1], options_2=composite(1, "q"))], [0], [1])
    inner = Graph(tensors, [Op(B.ADD, [0, 0], [1], options("AddOptions"))], [0], [1])
    x = np.array([-128, -50, 0, 3, 60, 127], np.int8)
    check(build([main, inner]), {"x": x}, tmp_path, rtol=0, atol=0)


def test_gather_of_an_operand_sized_at_run_time_is_refused():
    rows = gather_options([1], [0], [0], [1, 4])
    table = T("table", [6, 4], signature=[-1, 4])
    data = one_op(B.STABLEHLO_GATHER, [table, T("ids", [3, 1], I32)], [T("y", [3, 4])], opts_2=rows)
    with pytest.raises(UnsupportedOpError, match=r"STABLEHLO_GATHER\): input 0 has dimensions .* run time"):
        offload.load(data)


@pytest.mark.parametrize(
    "target, match",
    [
        (7, r"operator 0 \(STABLEHLO_COMPOSITE\): its decomposition subgraph 7 is outside the model's 2"),
        (1, r"operator 0 \(STABLEHLO_COMPOSITE\): its decomposition subgraph 1 calls back .*0 → 1 → 1"),
        (0, r"operator 0 \(STABLEHLO_COMPOSITE\): its decomposition subgraph 0 calls back .*0 → 1 → 0"),
    ],
)
def test_composite_with_a_bad_or_cyclic_decomposition_is_refused(target, match):
    main = Graph(
        [T("x", [4]), T("y", [4])], [Op(B.STABLEHLO_COMPOSITE, [0], [1], options_2=composite(1))], [0], [1]
    )
    inner = Graph(
        [T("x", [4]), T("y", [4])],
        [Op(B.STABLEHLO_COMPOSITE, [0], [1], options_2=composite(target))],
        [0],
        [1],
    )
    with pytest.raises(ModelFormatError, match=match):
        offload.load(build([main, inner]))


def test_case_runs_the_indexed_branch_and_the_last_for_any_other_index(tmp_path):
    def branch(code) -> Graph:
        return Graph([T("x", [5]), T("y", [5])], [Op(code, [0], [1])], [0], [1])

    main = Graph(
        [T("i", [], I32), T("x", [5]), T("y", [5])],
        [
            Op(
                B.STABLEHLO_CASE,
                [0, 1],
                [2],
                options_2=options(
                    "StablehloCaseOptions",
                    BuiltinOptions2,
                    branch_subgraph_indices=np.array([1, 2, 3], np.int32),
                ),
            )
        ],
        [0, 1],
        [2],
    )
    data = build([main, branch(B.ABS), branch(B.NEG), branch(B.EXP)])
    x = floats(5)
    for i in (0, 1, 2, 3, -1):
        check(data, {"i": np.array(i, np.int32), "x": x}, tmp_path)


@pytest.mark.parametrize("ttype, dtype", [(TT.INT8, np.int8), (TT.INT16, np.int16), (I32, np.int32)])
def test_shift_left_within_the_width(ttype, dtype, tmp_path):
    """Shifts in [0, bits), bits shifted past the sign dropped; LiteRT's C shift is undefined
    outside that range (docs/tflite.md)."""
    bits = np.dtype(dtype).itemsize * 8
    a = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 12).astype(dtype)
    s = RNG.integers(0, bits, 12).astype(dtype)
    data = one_op(B.STABLEHLO_SHIFT_LEFT, [T("a", [12], ttype), T("s", [12], ttype)], [T("y", [12], ttype)])
    check(data, {"a": a, "s": s}, tmp_path, rtol=0, atol=0)


def gather_options(offset_dims, collapsed, start_map, sizes):
    vectors = {
        "offset_dims": offset_dims,
        "collapsed_slice_dims": collapsed,
        "start_index_map": start_map,
        "slice_sizes": sizes,
    }
    fields = {k: np.array(v, np.int64) for k, v in vectors.items()}
    return options("StablehloGatherOptions", BuiltinOptions2, index_vector_dim=1, **fields)


def test_gather_rows_and_clamped_windows(tmp_path):
    """An embedding lookup (rows of a [6, 4] table, ONNX's Gather; an id past the end clamped)
    and 2×2 windows of a [5, 6] operand whose starts past the edge are clamped (GatherND)."""
    rows = gather_options([1], [0], [0], [1, 4])
    data = one_op(
        B.STABLEHLO_GATHER, [T("table", [6, 4]), T("ids", [4, 1], I32)], [T("y", [4, 4])], opts_2=rows
    )
    assert _op_types(data) >= {"Gather"} and "GatherND" not in _op_types(data)
    check(data, {"table": floats(6, 4), "ids": np.array([[5], [0], [2], [9]], np.int32)}, tmp_path)
    windows = gather_options([0, 2], [], [1, 0], [2, 2])
    data = one_op(
        B.STABLEHLO_GATHER, [T("x", [5, 6]), T("at", [3, 2], I32)], [T("y", [2, 3, 2])], opts_2=windows
    )
    assert "GatherND" in _op_types(data)
    check(data, {"x": floats(5, 6), "at": np.array([[1, 2], [5, 4], [-1, 0]], np.int32)}, tmp_path)


def _op_types(data: bytes) -> set:
    return {op.op_type for op in offload.load(data).main.body.walk()}


def reducer_graph(code, options_fn=None) -> Graph:
    return Graph([T("a", []), T("b", []), T("y", [])], [Op(code, [0, 1], [2], options_fn)], [0, 1], [2])


@pytest.mark.parametrize("code", [B.STABLEHLO_ADD, B.STABLEHLO_MAXIMUM, None])
def test_scatter_rows_with_add_max_or_replace(code, tmp_path):
    opts = options(
        "StablehloScatterOptions",
        BuiltinOptions2,
        update_window_dims=np.array([1], np.int64),
        inserted_window_dims=np.array([0], np.int64),
        scatter_dims_to_operand_dims=np.array([0], np.int64),
        index_vector_dim=1,
        update_computation_subgraph_index=1,
    )
    body = reducer_graph(code) if code is not None else Graph([T("a", []), T("b", [])], [], [0, 1], [1])
    main = Graph(
        [T("x", [5, 3]), T("at", [3, 1], I32), T("u", [3, 3]), T("y", [5, 3])],
        [Op(B.STABLEHLO_SCATTER, [0, 1, 2], [3], options_2=opts)],
        [0, 1, 2],
        [3],
    )
    at = np.array([[4], [1], [4] if code is not None else [2]], np.int32)
    check(build([main, body]), {"x": floats(5, 3), "at": at, "u": floats(3, 3)}, tmp_path)


@pytest.mark.parametrize("code", [B.STABLEHLO_MAXIMUM, B.STABLEHLO_ADD])
def test_reduce_window_pools_with_strides_and_padding(code, tmp_path):
    opts = options(
        "StablehloReduceWindowOptions",
        BuiltinOptions2,
        window_dimensions=np.array([1, 3, 3, 1], np.int64),
        window_strides=np.array([1, 2, 2, 1], np.int64),
        base_dilations=np.array([1, 1, 1, 1], np.int64),
        window_dilations=np.array([1, 1, 1, 1], np.int64),
        padding=np.array([0, 0, 1, 1, 1, 1, 0, 0], np.int64),
        body_subgraph_index=1,
    )
    init = np.array(-np.inf if code == B.STABLEHLO_MAXIMUM else 0.0, np.float32)
    main = Graph(
        [T("x", [1, 7, 6, 2]), T("init", [], F32, init), T("y", [1, 4, 3, 2])],
        [Op(B.STABLEHLO_REDUCE_WINDOW, [0, 1], [2], options_2=opts)],
        [0],
        [2],
    )
    check(build([main, reducer_graph(code)]), {"x": floats(1, 7, 6, 2)}, tmp_path, rtol=1e-5)


@pytest.mark.parametrize(
    "algorithm, state, ttype, shape",
    [
        (RngAlgorithm.PHILOX, 3, TT.INT32, [2, 3]),
        (RngAlgorithm.THREEFRY, 2, TT.INT64, [3, 3]),
    ],
)
def test_rng_bit_generator_gives_litert_bits_and_state(algorithm, state, ttype, shape, tmp_path):
    """Partial last blocks, 64-bit outputs from word pairs, and a counter that wraps past 2⁶⁴."""
    opts = options("StablehloRngBitGeneratorOptions", BuiltinOptions2, algorithm=algorithm)
    data = one_op(
        B.STABLEHLO_RNG_BIT_GENERATOR,
        [T("s", [state], TT.UINT64)],
        [T("next", [state], TT.UINT64), T("bits", shape, ttype)],
        opts_2=opts,
    )
    s = np.array([0x9E3779B9_12345678, 0xFFFFFFFF_FFFFFFFE, 77][:state], np.uint64)
    check(data, {"s": s}, tmp_path, rtol=0, atol=0)


def builtin_reduce_window(
    function: int, x: np.ndarray, ttype, init, window, strides, dilations, out
) -> bytes:
    """One REDUCE_WINDOW (the builtin) over input ``x``, its window given as int64 constants."""
    ints = [
        T(name, [len(window)], TT.INT64, np.array(v, np.int64))
        for name, v in zip("wsd", (window, strides, dilations))
    ]
    inputs = [T("x", list(x.shape), ttype), T("init", [], ttype, np.array(init, x.dtype)), *ints]
    opts = options("ReduceWindowOptions", BuiltinOptions2, reduce_function=function)
    return one_op(B.REDUCE_WINDOW, inputs, [T("y", out, ttype)], opts_2=opts)


@pytest.mark.parametrize(
    "function,dtype,init,window,strides,dilations,out",
    [
        (RWF.ADD, np.float32, 0.0, [1, 2, 2, 1], [1, 2, 2, 1], [1, 1, 1, 1], [1, 2, 3, 2]),
        (RWF.MAXIMUM, np.float32, -np.inf, [1, 2, 2, 1], [1, 1, 1, 1], [1, 2, 2, 1], [1, 3, 4, 2]),
        (RWF.MUL, np.int32, 1, [2, 3], [1, 2], [1, 1], [4, 2]),
        (RWF.MINIMUM, np.int8, 100, [3, 2], [2, 1], [1, 2], [2, 4]),
        (RWF.ALL, np.bool_, True, [2, 2], [1, 2], [1, 1], [4, 3]),
        (RWF.ANY, np.bool_, False, [2, 2], [2, 1], [2, 1], [2, 5]),
        (RWF.ALL, np.float32, 1.0, [2, 2], [1, 2], [1, 1], [4, 3]),
        (RWF.ANY, np.int32, 0, [1, 2], [1, 1], [1, 1], [5, 5]),
        (RWF.ADD, np.float32, 0.5, [6, 1], [1, 1], [1, 1], [0, 6]),
    ],
)
def test_builtin_reduce_window(function, dtype, init, window, strides, dilations, out, tmp_path):
    shape = [1, 5, 6, 2] if len(window) == 4 else [5, 6]
    if dtype == np.float32:
        x = floats(*shape)
        if function == RWF.ALL:
            x[RNG.random(shape) < 0.2] = 0.0
    else:
        low = {RWF.ANY: -1, RWF.MUL: 1}.get(function, 0)
        x = RNG.integers(low, 50 if dtype == np.int8 else 3, shape).astype(dtype)
        if function == RWF.ANY:
            x[RNG.random(shape) < 0.6] = 0
    ttype = {np.float32: F32, np.int32: I32, np.int8: TT.INT8, np.bool_: TT.BOOL}[dtype]
    data = builtin_reduce_window(function, x, ttype, init, window, strides, dilations, out)
    check(data, {"x": x}, tmp_path, rtol=1e-6)


def test_builtin_reduce_window_refuses_an_unknown_function():
    data = builtin_reduce_window(RWF.UNSUPPORTED, floats(5, 6), F32, 0.0, [2, 2], [1, 1], [1, 1], [4, 5])
    with pytest.raises(UnsupportedOpError, match=r"REDUCE_WINDOW.*reduce_function 0"):
        offload.load(data)
