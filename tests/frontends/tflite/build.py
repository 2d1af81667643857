"""Small TFLite models built by hand with the flatc-generated builders, for cases a converter
does not write: an operator offload lacks, and constant buffers stored after the flatbuffer."""

from __future__ import annotations

import flatbuffers
import numpy as np

from offload.schemas.generated.tflite import Buffer, Model, Operator, OperatorCode, SubGraph, Tensor
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
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
