"""Sample programs for the .pte tests, built with the generated object API directly."""

from __future__ import annotations

import numpy as np

from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer import (
    AllocationDetails,
    BackendDelegate,
    BackendDelegateDataReference,
    Bool,
    BoolList,
    Chain,
    CompileSpec,
    ContainerMetadata,
    DelegateCall,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtraTensorInfo,
    Frame,
    FrameList,
    FreeCall,
    Instruction,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    Operator,
    OptionalTensorList,
    Program,
    String,
    SubsegmentOffsets,
    Tensor,
    TensorList,
)
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments as IA
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes as KT


def _make(cls, **fields):
    obj = cls()
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def evalue(kind: int, val) -> EValue.EValueT:
    return _make(EValue.EValueT, valType=kind, val=val)


def tensor(
    scalar_type: int, sizes, *, buffer: int = 0, planned_at: int | None = None, name: str | None = None
):
    t = _make(
        Tensor.TensorT,
        scalarType=scalar_type,
        sizes=list(sizes),
        dimOrder=list(range(len(sizes))),
        dataBufferIdx=buffer,
    )
    if planned_at is not None:
        t.allocationInfo = _make(
            AllocationDetails.AllocationDetailsT,
            memoryId=1,
            memoryOffsetLow=planned_at & 0xFFFFFFFF,
            memoryOffsetHigh=planned_at >> 32,
        )
    if name is not None:
        t.extraTensorInfo = _make(ExtraTensorInfo.ExtraTensorInfoT, fullyQualifiedName=name)
    return evalue(KT.Tensor, t)


def every_value_kind() -> list:
    """One EValue of every KernelTypes member (index 0 Null, 1 Bool(false), as docs/pte.md says)."""
    return [
        evalue(KT.Null, Null.NullT()),
        evalue(KT.Bool, _make(Bool.BoolT, boolVal=False)),
        evalue(KT.Int, _make(Int.IntT, intVal=-(1 << 40))),
        evalue(KT.Double, _make(Double.DoubleT, doubleVal=2.5)),
        tensor(pte.SCALAR_TYPES["FLOAT"], [2, 3], buffer=1, name="weight"),
        tensor(pte.SCALAR_TYPES["INT64"], [4], planned_at=(1 << 33) + 16, name="x"),
        evalue(KT.String, _make(String.StringT, stringVal="héllo")),
        evalue(KT.IntList, _make(IntList.IntListT, items=[1, -2, 1 << 50])),
        evalue(KT.DoubleList, _make(DoubleList.DoubleListT, items=[0.5, -1.25])),
        evalue(KT.BoolList, _make(BoolList.BoolListT, items=[True, False, True])),
        evalue(KT.TensorList, _make(TensorList.TensorListT, items=[4, 5])),
        evalue(KT.OptionalTensorList, _make(OptionalTensorList.OptionalTensorListT, items=[0, 5])),
        tensor(pte.SCALAR_TYPES["STRING"], [2], buffer=2),
    ]


def instruction(kind: int, args) -> Instruction.InstructionT:
    return _make(Instruction.InstructionT, instrArgsType=kind, instrArgs=args)


def every_instruction_kind() -> list:
    return [
        instruction(IA.KernelCall, _make(KernelCall.KernelCallT, opIndex=0, args=[4, 5, 2])),
        instruction(IA.DelegateCall, _make(DelegateCall.DelegateCallT, delegateIndex=0, args=[5, 5])),
        instruction(IA.MoveCall, _make(MoveCall.MoveCallT, moveFrom=4, moveTo=5)),
        instruction(
            IA.JumpFalseCall, _make(JumpFalseCall.JumpFalseCallT, condValueIndex=1, destinationInstruction=4)
        ),
        instruction(IA.FreeCall, _make(FreeCall.FreeCallT, valueIndex=5)),
    ]


def plan(
    name: str, values: list, instructions: list, *, frames: bool = False
) -> ExecutionPlan.ExecutionPlanT:
    chain = _make(Chain.ChainT, inputs=[5], outputs=[5], instructions=instructions)
    if frames:
        frame = _make(Frame.FrameT, filename="model.onnx", lineno=7, name=name, context="Add(x, y)")
        chain.stacktrace = [_make(FrameList.FrameListT, items=[frame]) for _ in instructions]
    delegate = _make(
        BackendDelegate.BackendDelegateT,
        id="OffloadCL",
        processed=_make(BackendDelegateDataReference.BackendDelegateDataReferenceT, location=1, index=1),
        compileSpecs=[_make(CompileSpec.CompileSpecT, key="level", value=[3])],
    )
    return _make(
        ExecutionPlan.ExecutionPlanT,
        name=name,
        containerMetaType=_make(
            ContainerMetadata.ContainerMetadataT, encodedInpStr='["x"]', encodedOutStr='["y"]'
        ),
        values=values,
        inputs=[5],
        outputs=[5],
        chains=[chain],
        operators=[_make(Operator.OperatorT, name="onnx::Add", overload="")],
        delegates=[delegate],
        nonConstBufferSizes=[0, (1 << 33) + 64],
    )


def constants(alignment: int = pte.DEFAULT_CONSTANT_ALIGNMENT) -> pte.ConstantData:
    data = pte.ConstantData(alignment)
    data.add(np.arange(6, dtype="<f4").tobytes())  # weight: FLOAT [2, 3]
    data.add(b"\x02\x00\x00\x00" + b"\x01\x00\x00\x00a" + b"\x02\x00\x00\x00bc")  # STRING [2]
    return data


def program(plans: list, data: pte.ConstantData | None) -> Program.ProgramT:
    p = _make(Program.ProgramT, version=0, executionPlan=plans)
    if data is not None:
        p.constantSegment = _make(SubsegmentOffsets.SubsegmentOffsetsT, segmentIndex=0, offsets=data.offsets)
    return p


def small(*, with_segments: bool = True) -> bytes:
    """Two plans, every value and instruction kind; constants and a delegate blob in segments."""
    data = constants() if with_segments else None
    values = every_value_kind()
    p = program(
        [
            plan("forward", values, every_instruction_kind(), frames=True),
            plan("forward/#0/body", values[:6], []),
        ],
        data,
    )
    segments = [data.payload(), b"delegate blob" * 3] if with_segments else []
    return pte.serialize(p, segments)


def medium(n_values: int = 2000, *, with_segments: bool = True) -> bytes:
    """One plan with ``n_values`` values (a mix of kinds) and an instruction per value."""
    data = constants() if with_segments else None
    kinds = every_value_kind()
    values = kinds[:2] + [kinds[2 + i % (len(kinds) - 2)] for i in range(n_values - 2)]
    calls = every_instruction_kind()
    instructions = [calls[i % len(calls)] for i in range(n_values)]
    p = program([plan("forward", values, instructions)], data)
    segments = [data.payload(), b"blob A" * 100, b"blob A" * 100, b"x"] if with_segments else []
    return pte.serialize(p, segments)
