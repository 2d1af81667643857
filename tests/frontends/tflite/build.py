"""Small TFLite models built by hand with the flatc-generated builders, for cases a converter
does not write: an operator offload lacks, and constant buffers stored after the flatbuffer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import flatbuffers
import numpy as np

from offload.schemas.generated.tflite import (
    Buffer,
    CallOnceOptions,
    DepthwiseConv2DOptions,
    DimensionMetadata,
    IfOptions,
    Int32Vector,
    Model,
    Operator,
    OperatorCode,
    Pool2DOptions,
    QuantizationParameters,
    SparsityParameters,
    StablehloWhileOptions,
    SubGraph,
    Tensor,
    Uint8Vector,
    Uint16Vector,
    UnidirectionalSequenceLSTMOptions,
    VarHandleOptions,
    WhileOptions,
)
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.BuiltinOptions import BuiltinOptions
from offload.schemas.generated.tflite.BuiltinOptions2 import BuiltinOptions2
from offload.schemas.generated.tflite.Padding import Padding
from offload.schemas.generated.tflite.SparseIndexVector import SparseIndexVector
from offload.schemas.generated.tflite.TensorType import TensorType


def _ints(b: flatbuffers.Builder, start, values) -> int:
    start(b, len(values))
    for v in reversed(values):
        b.PrependInt32(v)
    return b.EndVector()


def _tables(b: flatbuffers.Builder, start, offsets) -> int:
    start(b, len(offsets))
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def binary_model(op: int, const: np.ndarray, *, external: bool) -> bytes:
    """``y = op(x, c)`` on float32 [len(c)]: x the input, c a constant in buffer 1, stored in the
    flatbuffer's data vector or (``external``) after the flatbuffer through offset/size."""
    b = flatbuffers.Builder(1024)
    n = len(const)
    tensors = []
    for name in ["x", "c", "y"]:
        name_off = b.CreateString(name)
        shape = _ints(b, Tensor.StartShapeVector, [n])
        Tensor.Start(b)
        Tensor.AddShape(b, shape)
        Tensor.AddType(b, TensorType.FLOAT32)
        Tensor.AddBuffer(b, 1 if name == "c" else 0)
        Tensor.AddName(b, name_off)
        tensors.append(Tensor.End(b))
    tensor_vec = _tables(b, SubGraph.StartTensorsVector, tensors)
    op_in = _ints(b, Operator.StartInputsVector, [0, 1])
    op_out = _ints(b, Operator.StartOutputsVector, [2])
    Operator.Start(b)
    Operator.AddOpcodeIndex(b, 0)
    Operator.AddInputs(b, op_in)
    Operator.AddOutputs(b, op_out)
    operator = Operator.End(b)
    ops = _tables(b, SubGraph.StartOperatorsVector, [operator])
    sg_in = _ints(b, SubGraph.StartInputsVector, [0])
    sg_out = _ints(b, SubGraph.StartOutputsVector, [2])
    SubGraph.Start(b)
    SubGraph.AddTensors(b, tensor_vec)
    SubGraph.AddInputs(b, sg_in)
    SubGraph.AddOutputs(b, sg_out)
    SubGraph.AddOperators(b, ops)
    subgraph = SubGraph.End(b)
    OperatorCode.Start(b)
    OperatorCode.AddDeprecatedBuiltinCode(b, min(op, BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES))
    OperatorCode.AddBuiltinCode(b, op)
    OperatorCode.AddVersion(b, 1)
    code = OperatorCode.End(b)

    payload = np.ascontiguousarray(const, dtype="<f4").tobytes()
    # The flatbuffer's final size is not known while it is built; an external buffer's offset
    # is patched in afterwards (the field is written non-default so that its slot exists).
    placeholder = 0x7EAD_BEEF_1234_5678
    data = None if external else b.CreateByteVector(payload)
    buffers = []
    for i in range(2):
        Buffer.Start(b)
        if i == 1 and external:
            Buffer.AddOffset(b, placeholder)
            Buffer.AddSize(b, len(payload))
        elif i == 1:
            Buffer.AddData(b, data)
        buffers.append(Buffer.End(b))
    buffer_vec = _tables(b, Model.StartBuffersVector, buffers)
    code_vec = _tables(b, Model.StartOperatorCodesVector, [code])
    sg_vec = _tables(b, Model.StartSubgraphsVector, [subgraph])
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, code_vec)
    Model.AddSubgraphs(b, sg_vec)
    Model.AddBuffers(b, buffer_vec)
    b.Finish(Model.End(b), file_identifier=b"TFL3")
    out = bytearray(b.Output())
    if external:
        at = out.find(placeholder.to_bytes(8, "little"))
        offset = (len(out) + 15) // 16 * 16
        out[at : at + 8] = offset.to_bytes(8, "little")
        out += bytes(offset - len(out)) + payload
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# A general builder: several subgraphs of tensors and operators, for the structures the converter
# writes rarely or not at all (a computing CALL_ONCE, sparse constants, custom operators).


@dataclass
class T:
    """A tensor: a constant when ``data`` is given (stored in a buffer of its own)."""

    name: str
    shape: list
    type: int = TensorType.FLOAT32
    data: bytes | np.ndarray | None = None
    is_variable: bool = False
    sparsity: Callable | None = None  # b → SparsityParameters offset
    signature: list | None = None  # shape_signature: -1 for a dimension known only at run time
    quant: tuple[float, int] | None = None  # per-tensor (scale, zero point)


@dataclass
class Op:
    """An operator: ``code`` a BuiltinOperator or a custom code (str); ``options`` builds its
    builtin options, b → (BuiltinOptions type, offset)."""

    code: int | str
    inputs: list
    outputs: list
    options: Callable | None = None
    custom_options: bytes | None = None
    version: int = 1
    options_2: Callable | None = None  # the second options union (StableHLO operators)


@dataclass
class Graph:
    tensors: list
    ops: list
    inputs: list
    outputs: list


def _quantization(b: flatbuffers.Builder, scale: float, zero_point: int) -> int:
    QuantizationParameters.StartScaleVector(b, 1)
    b.PrependFloat32(scale)
    scales = b.EndVector()
    QuantizationParameters.StartZeroPointVector(b, 1)
    b.PrependInt64(zero_point)
    zero_points = b.EndVector()
    QuantizationParameters.Start(b)
    QuantizationParameters.AddScale(b, scales)
    QuantizationParameters.AddZeroPoint(b, zero_points)
    return QuantizationParameters.End(b)


def build(graphs: list[Graph]) -> bytes:
    """A TFL3 model of ``graphs`` (the first is the main subgraph)."""
    b = flatbuffers.Builder(4096)
    codes: list = []
    for g in graphs:
        for op in g.ops:
            key = (op.code, op.version)
            if key not in codes:
                codes.append(key)
    buffers = [None]  # buffer 0: the empty sentinel
    subgraphs = []
    for g in graphs:
        tensors = []
        for t in g.tensors:
            name = b.CreateString(t.name)
            shape = _ints(b, Tensor.StartShapeVector, list(t.shape))
            signature = _ints(b, Tensor.StartShapeSignatureVector, t.signature) if t.signature else None
            sparsity = t.sparsity(b) if t.sparsity is not None else None
            quant = _quantization(b, *t.quant) if t.quant is not None else None
            index = 0
            if t.data is not None:
                buffers.append(t.data.tobytes() if isinstance(t.data, np.ndarray) else bytes(t.data))
                index = len(buffers) - 1
            Tensor.Start(b)
            Tensor.AddShape(b, shape)
            if signature is not None:
                Tensor.AddShapeSignature(b, signature)
            Tensor.AddType(b, t.type)
            Tensor.AddBuffer(b, index)
            Tensor.AddName(b, name)
            if t.is_variable:
                Tensor.AddIsVariable(b, True)
            if sparsity is not None:
                Tensor.AddSparsity(b, sparsity)
            if quant is not None:
                Tensor.AddQuantization(b, quant)
            tensors.append(Tensor.End(b))
        ops = []
        for op in g.ops:
            options = op.options(b) if op.options is not None else None
            options_2 = op.options_2(b) if op.options_2 is not None else None
            custom = b.CreateByteVector(op.custom_options) if op.custom_options is not None else None
            ins = _ints(b, Operator.StartInputsVector, op.inputs)
            outs = _ints(b, Operator.StartOutputsVector, op.outputs)
            Operator.Start(b)
            Operator.AddOpcodeIndex(b, codes.index((op.code, op.version)))
            Operator.AddInputs(b, ins)
            Operator.AddOutputs(b, outs)
            if options is not None:
                Operator.AddBuiltinOptionsType(b, options[0])
                Operator.AddBuiltinOptions(b, options[1])
            if options_2 is not None:
                Operator.AddBuiltinOptions2Type(b, options_2[0])
                Operator.AddBuiltinOptions2(b, options_2[1])
            if custom is not None:
                Operator.AddCustomOptions(b, custom)
            ops.append(Operator.End(b))
        tensor_vec = _tables(b, SubGraph.StartTensorsVector, tensors)
        op_vec = _tables(b, SubGraph.StartOperatorsVector, ops)
        sg_in = _ints(b, SubGraph.StartInputsVector, g.inputs)
        sg_out = _ints(b, SubGraph.StartOutputsVector, g.outputs)
        SubGraph.Start(b)
        SubGraph.AddTensors(b, tensor_vec)
        SubGraph.AddInputs(b, sg_in)
        SubGraph.AddOutputs(b, sg_out)
        SubGraph.AddOperators(b, op_vec)
        subgraphs.append(SubGraph.End(b))
    code_offsets = []
    for code, version in codes:
        custom = b.CreateString(code) if isinstance(code, str) else None
        builtin = BuiltinOperator.CUSTOM if isinstance(code, str) else code
        OperatorCode.Start(b)
        OperatorCode.AddDeprecatedBuiltinCode(
            b, min(builtin, BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
        )
        OperatorCode.AddBuiltinCode(b, builtin)
        OperatorCode.AddVersion(b, version)
        if custom is not None:
            OperatorCode.AddCustomCode(b, custom)
        code_offsets.append(OperatorCode.End(b))
    buffer_offsets = []
    for data in buffers:
        vec = None
        if data is not None:
            b.StartVector(1, len(data), 16)  # aligned for any element type
            b.head = b.head - len(data)
            b.Bytes[b.head : b.head + len(data)] = data
            vec = b.EndVector()
        Buffer.Start(b)
        if vec is not None:
            Buffer.AddData(b, vec)
        buffer_offsets.append(Buffer.End(b))
    buffer_vec = _tables(b, Model.StartBuffersVector, buffer_offsets)
    code_vec = _tables(b, Model.StartOperatorCodesVector, code_offsets)
    sg_vec = _tables(b, Model.StartSubgraphsVector, subgraphs)
    Model.Start(b)
    Model.AddVersion(b, 3)
    Model.AddOperatorCodes(b, code_vec)
    Model.AddSubgraphs(b, sg_vec)
    Model.AddBuffers(b, buffer_vec)
    b.Finish(Model.End(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _call_once(index: int) -> Callable:
    def options(b):
        CallOnceOptions.Start(b)
        CallOnceOptions.AddInitSubgraphIndex(b, index)
        return BuiltinOptions.CallOnceOptions, CallOnceOptions.End(b)

    return options


def _var_handle(name: str) -> Callable:
    def options(b):
        shared = b.CreateString(name)
        VarHandleOptions.Start(b)
        VarHandleOptions.AddSharedName(b, shared)
        return BuiltinOptions.VarHandleOptions, VarHandleOptions.End(b)

    return options


INIT_CONSTANT = np.arange(6, dtype="<f4").reshape(2, 3) / 4


def computed_init_model(init_index: int = 1) -> bytes:
    """``acc += x; y = acc`` on a [2, 3] variable whose CALL_ONCE subgraph computes its initial
    value, exp(2 · INIT_CONSTANT), instead of assigning a constant."""
    main = Graph(
        [T("x", [2, 3]), T("handle", [], TensorType.RESOURCE), T("read", [2, 3]), T("y", [2, 3])],
        [
            Op(BuiltinOperator.CALL_ONCE, [], [], _call_once(init_index)),
            Op(BuiltinOperator.VAR_HANDLE, [], [1], _var_handle("acc")),
            Op(BuiltinOperator.READ_VARIABLE, [1], [2]),
            Op(BuiltinOperator.ADD, [2, 0], [3]),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [1, 3], []),
        ],
        [0],
        [3],
    )
    init = Graph(
        [
            T("h", [], TensorType.RESOURCE),
            T("c", [2, 3], data=INIT_CONSTANT),
            T("two", [], data=np.array(2, "<f4")),
            T("doubled", [2, 3]),
            T("initial", [2, 3]),
        ],
        [
            Op(BuiltinOperator.VAR_HANDLE, [], [0], _var_handle("acc")),
            Op(BuiltinOperator.MUL, [1, 2], [3]),
            Op(BuiltinOperator.EXP, [3], [4]),
            Op(BuiltinOperator.ASSIGN_VARIABLE, [0, 4], []),
        ],
        [],
        [],
    )
    return build([main, init])


def custom_model(code: str, custom_options: bytes) -> bytes:
    """``y = code(x)`` on float32 [2, 3]: one custom operator with its option bytes."""
    graph = Graph(
        [T("x", [2, 3]), T("y", [2, 3])],
        [Op(code, [0], [1], custom_options=custom_options)],
        [0],
        [1],
    )
    return build([graph])


# ---------------------------------------------------------------------------------------------
# Sparse constants: an encoder of TFLite's sparsity format, written from its schema comments.

_INDEX_VECTORS = {  # SparseIndexVector member: (type code, table module, element prepend)
    "int32": (SparseIndexVector.Int32Vector, Int32Vector, "PrependInt32"),
    "uint16": (SparseIndexVector.Uint16Vector, Uint16Vector, "PrependUint16"),
    "uint8": (SparseIndexVector.Uint8Vector, Uint8Vector, "PrependUint8"),
}


@dataclass
class Sparse:
    """``dense`` in TFLite's sparse form: ``blocks`` {dimension: block size}, the stored
    dimensions' ``order`` and each stored dimension's ``formats`` (0 DENSE, 1 SPARSE_CSR), the
    indices written as ``index_type``. ``values`` are the stored values; ``sparsity`` builds the
    SparsityParameters table."""

    dense: np.ndarray
    blocks: dict
    order: list
    formats: list
    index_type: str = "int32"

    def __post_init__(self):
        n = self.dense.ndim
        self.block_map = list(self.blocks)
        expanded = self.dense
        shape = []  # split each blocked dimension into (outer, block), blocks last
        for j, size in enumerate(self.dense.shape):
            shape.append(size // self.blocks.get(j, 1))
        inner = [self.blocks[d] for d in self.block_map]
        split = []
        for j, size in enumerate(self.dense.shape):
            split += [size // self.blocks[j], self.blocks[j]] if j in self.blocks else [size]
        expanded = self.dense.reshape(split)
        axis, outer_axes, inner_axes = 0, [], {}
        for j in range(n):
            outer_axes.append(axis)
            if j in self.blocks:
                inner_axes[j] = axis + 1
                axis += 2
            else:
                axis += 1
        expanded = expanded.transpose(outer_axes + [inner_axes[d] for d in self.block_map])
        assert list(expanded.shape) == shape + inner
        self.stored = expanded.transpose(self.order)
        self.segments = [[0] for _ in self.order]
        self.indices = [[] for _ in self.order]
        values = []

        def walk(prefix: tuple, level: int) -> None:
            if level == self.stored.ndim:
                values.append(self.stored[prefix])
                return
            for c in range(self.stored.shape[level]):
                if self.formats[level] == 1:
                    if not np.any(self.stored[(*prefix, c)]):
                        continue
                    self.indices[level].append(c)
                walk((*prefix, c), level + 1)
            if self.formats[level] == 1:
                self.segments[level].append(len(self.indices[level]))

        walk((), 0)
        self.values = np.array(values, self.dense.dtype)

    def _index_vector(self, b, values) -> tuple[int, int]:
        code, table, prepend = _INDEX_VECTORS[self.index_type]
        table.StartValuesVector(b, len(values))
        for v in reversed(values):
            getattr(b, prepend)(v)
        vec = b.EndVector()
        table.Start(b)
        table.AddValues(b, vec)
        return code, table.End(b)

    def sparsity(self, b) -> int:
        levels = []
        for level, fmt in enumerate(self.formats):
            vectors = None
            if fmt == 1:
                vectors = (
                    self._index_vector(b, self.segments[level]),
                    self._index_vector(b, self.indices[level]),
                )
            DimensionMetadata.Start(b)
            DimensionMetadata.AddFormat(b, fmt)
            if fmt == 0:
                DimensionMetadata.AddDenseSize(b, self.stored.shape[level])
            elif vectors is not None:
                (seg_type, seg), (idx_type, idx) = vectors
                DimensionMetadata.AddArraySegmentsType(b, seg_type)
                DimensionMetadata.AddArraySegments(b, seg)
                DimensionMetadata.AddArrayIndicesType(b, idx_type)
                DimensionMetadata.AddArrayIndices(b, idx)
            levels.append(DimensionMetadata.End(b))
        order = _ints(b, SparsityParameters.StartTraversalOrderVector, self.order)
        block_map = (
            _ints(b, SparsityParameters.StartBlockMapVector, self.block_map) if self.block_map else None
        )
        metadata = _tables(b, SparsityParameters.StartDimMetadataVector, levels)
        SparsityParameters.Start(b)
        SparsityParameters.AddTraversalOrder(b, order)
        if block_map is not None:
            SparsityParameters.AddBlockMap(b, block_map)
        SparsityParameters.AddDimMetadata(b, metadata)
        return SparsityParameters.End(b)


def densify_model(sparse: Sparse) -> bytes:
    """``y = x + DENSIFY(w)``, w the sparse constant, x and y float32 of w's shape."""
    shape = list(sparse.dense.shape)
    graph = Graph(
        [
            T("x", shape),
            T("w", shape, data=sparse.values.astype("<f4"), sparsity=sparse.sparsity),
            T("w_dense", shape),
            T("y", shape),
        ],
        [Op(BuiltinOperator.DENSIFY, [1], [2]), Op(BuiltinOperator.ADD, [0, 2], [3])],
        [0],
        [3],
    )
    return build([graph])


def _if_options(then_index: int, else_index: int) -> Callable:
    def options(b):
        IfOptions.Start(b)
        IfOptions.AddThenSubgraphIndex(b, then_index)
        IfOptions.AddElseSubgraphIndex(b, else_index)
        return BuiltinOptions.IfOptions, IfOptions.End(b)

    return options


def if_chain_model(depth: int, targets=None) -> bytes:
    """Subgraph k (k < depth) is ``y = IF(c, x)`` whose branches both call subgraph
    ``targets(k)`` (k + 1 by default); subgraph ``depth`` is ``y = x + x``. Inputs: c (bool),
    x (float32 [2])."""
    targets = targets or (lambda k: k + 1)
    graphs = []
    for k in range(depth):
        nxt = targets(k)
        graphs.append(
            Graph(
                [T("c", [], TensorType.BOOL), T("x", [2]), T("y", [2])],
                [Op(BuiltinOperator.IF, [0, 0, 1], [2], _if_options(nxt, nxt))],
                [0, 1],
                [2],
            )
        )
    graphs.append(
        Graph(
            [T("c", [], TensorType.BOOL), T("x", [2]), T("y", [2])],
            [Op(BuiltinOperator.ADD, [1, 1], [2])],
            [0, 1],
            [2],
        )
    )
    return build(graphs)


def _stablehlo_while_options(cond: int, body: int) -> Callable:
    def options(b):
        StablehloWhileOptions.Start(b)
        StablehloWhileOptions.AddCondSubgraphIndex(b, cond)
        StablehloWhileOptions.AddBodySubgraphIndex(b, body)
        return BuiltinOptions2.StablehloWhileOptions, StablehloWhileOptions.End(b)

    return options


def _while_options(cond: int, body: int) -> Callable:
    def options(b):
        WhileOptions.Start(b)
        WhileOptions.AddCondSubgraphIndex(b, cond)
        WhileOptions.AddBodySubgraphIndex(b, body)
        return BuiltinOptions.WhileOptions, WhileOptions.End(b)

    return options


def loop_model(stablehlo: bool, cond: int = 1, body: int = 2) -> bytes:
    """``(i, x) → while i < 5: (i + 1, x · 1.5 + 1)`` over an int32 counter and a float32 [3],
    its condition (LESS against a constant) and body subgraphs: STABLEHLO_WHILE, or (the same
    loop for LiteRT, which has no STABLEHLO_WHILE kernel) WHILE."""
    if stablehlo:
        loop = Op(
            BuiltinOperator.STABLEHLO_WHILE, [0, 1], [2, 3], options_2=_stablehlo_while_options(cond, body)
        )
    else:
        loop = Op(BuiltinOperator.WHILE, [0, 1], [2, 3], _while_options(cond, body))
    main = Graph(
        [T("i", [], TensorType.INT32), T("x", [3]), T("i_out", [], TensorType.INT32), T("y", [3])],
        [loop],
        [0, 1],
        [2, 3],
    )
    condition = Graph(
        [
            T("i", [], TensorType.INT32),
            T("x", [3]),
            T("five", [], TensorType.INT32, np.array(5, "<i4")),
            T("c", [], TensorType.BOOL),
        ],
        [Op(BuiltinOperator.LESS, [0, 2], [3])],
        [0, 1],
        [3],
    )
    step = Graph(
        [
            T("i", [], TensorType.INT32),
            T("x", [3]),
            T("one", [], TensorType.INT32, np.array(1, "<i4")),
            T("k", [], data=np.array(1.5, "<f4")),
            T("b", [], data=np.array(1.0, "<f4")),
            T("i1", [], TensorType.INT32),
            T("scaled", [3]),
            T("x1", [3]),
        ],
        [
            Op(BuiltinOperator.ADD, [0, 2], [5]),
            Op(BuiltinOperator.MUL, [1, 3], [6]),
            Op(BuiltinOperator.ADD, [6, 4], [7]),
        ],
        [0, 1],
        [5, 7],
    )
    return build([main, condition, step])


def bounded_loop_model() -> bytes:
    """``(i, n, x) → while i < n: (i + 1, n, x · 1.5 + 1)``: WHILE whose bound is a loop variable
    the body passes through unchanged."""
    ints = [T("i", [], TensorType.INT32), T("n", [], TensorType.INT32)]
    main = Graph(
        [*ints, T("x", [3]), T("i_out", [], TensorType.INT32), T("n_out", [], TensorType.INT32), T("y", [3])],
        [Op(BuiltinOperator.WHILE, [0, 1, 2], [3, 4, 5], _while_options(1, 2))],
        [0, 1, 2],
        [3, 4, 5],
    )
    condition = Graph(
        [*ints, T("x", [3]), T("c", [], TensorType.BOOL)],
        [Op(BuiltinOperator.LESS, [0, 1], [3])],
        [0, 1, 2],
        [3],
    )
    step = Graph(
        [
            *ints,
            T("x", [3]),
            T("one", [], TensorType.INT32, np.array(1, "<i4")),
            T("k", [], data=np.array(1.5, "<f4")),
            T("b", [], data=np.array(1.0, "<f4")),
            T("i1", [], TensorType.INT32),
            T("scaled", [3]),
            T("x1", [3]),
        ],
        [
            Op(BuiltinOperator.ADD, [3, 0], [6]),  # 1 + i: the step's constant first
            Op(BuiltinOperator.MUL, [2, 4], [7]),
            Op(BuiltinOperator.ADD, [7, 5], [8]),
        ],
        [0, 1, 2],
        [6, 1, 8],
    )
    return build([main, condition, step])


def window_model(
    op: int, x_shape: list, y_shape: list, *, window=(1, 1), dilation=(1, 1), same=True
) -> bytes:
    """``y = op(x)`` for MAX_POOL_2D / AVERAGE_POOL_2D (``window`` the filter's height and width)
    or DEPTHWISE_CONV_2D (a 3 x 3 filter, a bias, ``dilation`` its factors), stride 1, SAME or
    VALID padding, on float32 NHWC ``x_shape``; the file declares ``y_shape``."""
    channels = x_shape[3]
    tensors = [T("x", x_shape), T("y", y_shape)]
    inputs = [0]
    if op == BuiltinOperator.DEPTHWISE_CONV_2D:
        weights = np.arange(9 * channels, dtype="<f4").reshape(1, 3, 3, channels) / 16 - 1
        tensors += [
            T("w", [1, 3, 3, channels], data=weights),
            T("b", [channels], data=np.full(channels, 0.5, "<f4")),
        ]
        inputs = [0, 2, 3]

    def options(b):
        padding = Padding.SAME if same else Padding.VALID
        if op == BuiltinOperator.DEPTHWISE_CONV_2D:
            DepthwiseConv2DOptions.Start(b)
            DepthwiseConv2DOptions.AddPadding(b, padding)
            DepthwiseConv2DOptions.AddStrideH(b, 1)
            DepthwiseConv2DOptions.AddStrideW(b, 1)
            DepthwiseConv2DOptions.AddDepthMultiplier(b, 1)
            DepthwiseConv2DOptions.AddDilationHFactor(b, dilation[0])
            DepthwiseConv2DOptions.AddDilationWFactor(b, dilation[1])
            return BuiltinOptions.DepthwiseConv2DOptions, DepthwiseConv2DOptions.End(b)
        Pool2DOptions.Start(b)
        Pool2DOptions.AddPadding(b, padding)
        Pool2DOptions.AddStrideH(b, 1)
        Pool2DOptions.AddStrideW(b, 1)
        Pool2DOptions.AddFilterHeight(b, window[0])
        Pool2DOptions.AddFilterWidth(b, window[1])
        return BuiltinOptions.Pool2DOptions, Pool2DOptions.End(b)

    version = 2 if op == BuiltinOperator.DEPTHWISE_CONV_2D else 1  # dilation came with version 2
    return build([Graph(tensors, [Op(op, inputs, [1], options, version=version)], [0], [1])])


def lstm_model(
    *,
    peepholes: bool = False,
    cifg: bool = False,
    projection: int = 0,
    cell_clip: float = 0.0,
    proj_clip: float = 0.0,
    time_major: bool = False,
    seed: int = 0,
) -> bytes:
    """One UNIDIRECTIONAL_SEQUENCE_LSTM (tanh) on a [2, 5, 3] sequence ([5, 2, 3] time-major),
    4 cells, with the optional parts asked for: peephole weights, CIFG (no input gate),
    a projection to ``projection`` outputs, clips. Weights are seeded; the states are variable
    tensors."""
    rng = np.random.default_rng(seed)
    batch, steps, n_in, n_cell = 2, 5, 3, 4
    n_out = projection or n_cell

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.6).astype("<f4")

    tensors = [T("x", [steps, batch, n_in] if time_major else [batch, steps, n_in])]
    inputs = [0]

    def add(name, array):
        tensors.append(T(name, list(array.shape), data=array))
        return len(tensors) - 1

    gates = "ifco"
    for g in gates:
        inputs.append(-1 if cifg and g == "i" else add(f"w_{g}", weights(n_cell, n_in)))
    for g in gates:
        inputs.append(-1 if cifg and g == "i" else add(f"r_{g}", weights(n_cell, n_out)))
    for g in "ifo":
        inputs.append(add(f"p_{g}", weights(n_cell)) if peepholes and not (cifg and g == "i") else -1)
    for g in gates:
        inputs.append(-1 if cifg and g == "i" else add(f"b_{g}", weights(n_cell)))
    inputs.append(add("proj_w", weights(n_out, n_cell)) if projection else -1)
    inputs.append(add("proj_b", weights(n_out)) if projection else -1)
    for name, size in (("h", n_out), ("c", n_cell)):
        tensors.append(T(name, [batch, size], is_variable=True))
        inputs.append(len(tensors) - 1)
    inputs += [-1] * 4
    tensors.append(T("y", [steps, batch, n_out] if time_major else [batch, steps, n_out]))

    def options(b):
        UnidirectionalSequenceLSTMOptions.Start(b)
        UnidirectionalSequenceLSTMOptions.AddFusedActivationFunction(b, 4)  # TANH
        UnidirectionalSequenceLSTMOptions.AddCellClip(b, cell_clip)
        UnidirectionalSequenceLSTMOptions.AddProjClip(b, proj_clip)
        UnidirectionalSequenceLSTMOptions.AddTimeMajor(b, time_major)
        return BuiltinOptions.UnidirectionalSequenceLSTMOptions, UnidirectionalSequenceLSTMOptions.End(b)

    op = Op(BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, [len(tensors) - 1], options)
    return build([Graph(tensors, [op], [0], [len(tensors) - 1])])
