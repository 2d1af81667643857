"""Lowering offload::Delegate ops: BackendDelegate entries, DelegateCalls, fallback plans, blob storage."""

import json

import numpy as np
import pytest

from offload.delegates.backend import CompileSpec
from offload.emit import lower
from offload.errors import UnsupportedOpError
from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer.DataLocation import DataLocation
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments as IA
from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes as K
from tests.delegated import delegated_program


def _parsed(program):
    program_t, segments = lower(program)
    return pte.parse(pte.serialize(program_t, segments))


def _specs(delegate) -> dict[str, bytes]:
    return {s.key: bytes(np.asarray(s.value, np.uint8)) for s in delegate.compileSpecs}


def test_delegate_op_becomes_backend_delegate_call_and_fallback_plan():
    f = _parsed(delegated_program(blobs=[b"compiled"]))
    forward, fallback = f.program.executionPlan
    assert forward.name == "forward" and fallback.name == "__offload_fallback__/forward/0"
    (d,) = forward.delegates
    assert d.id == "fake"
    assert d.processed.location == DataLocation.INLINE
    assert bytes(f.program.backendDelegateData[d.processed.index].data) == b"compiled"
    assert _specs(d) == {"k": b"1", "offload.fallback_plan": b"1"}
    kinds = [ins.instrArgsType for ins in forward.chains[0].instructions]
    assert kinds == [IA.DelegateCall, IA.KernelCall]
    call = forward.chains[0].instructions[0].instrArgs
    assert call.delegateIndex == 0
    x, y = [int(a) for a in call.args]
    assert x == int(forward.inputs[0])
    assert forward.values[y].val.extraTensorInfo.fullyQualifiedName == "y0"
    assert forward.values[y].val.allocationInfo is not None  # a planned output, as kernel outputs are
    # The fallback takes the delegate's inputs and lists its weight as a named constant.
    assert json.loads(fallback.containerMetaType.encodedInpStr) == ["d0/p"]
    consts = [v.val for v in fallback.values if v.valType == K.Tensor and v.val.dataBufferIdx]
    assert [c.extraTensorInfo.fullyQualifiedName for c in consts] == ["d0/w"]
    assert [o.name for o in fallback.operators] == ["onnx::Mul", "onnx::Relu"]
    assert not fallback.delegates


def test_big_blobs_go_to_segments_and_identical_blobs_are_stored_once():
    big, other = b"\x01" * (64 * 1024 + 1), b"\x02" * (100 * 1024)
    small = b"s" * (64 * 1024)  # exactly the limit: still inline
    f = _parsed(delegated_program(blobs=[big, small, big, small, other]))
    refs = [(d.processed.location, d.processed.index) for d in f.program.executionPlan[0].delegates]
    seg, inl = DataLocation.SEGMENT, DataLocation.INLINE
    assert refs == [(seg, 1), (inl, 0), (seg, 1), (inl, 0), (seg, 2)]
    assert len(f.program.backendDelegateData) == 1
    assert bytes(f.segments[1]) == big and bytes(f.segments[2]) == other
    # One copy of each blob in the file.
    program_t, segments = lower(delegated_program(blobs=[big, small, big, small, other]))
    data = pte.serialize(program_t, segments)
    assert data.count(big) == 1 and data.count(other) == 1
    # Each delegate has its own fallback plan.
    names = [p.name for p in f.program.executionPlan]
    assert names[1:] == [f"__offload_fallback__/forward/{k}" for k in range(5)]
    fallbacks = [int(_specs(d)["offload.fallback_plan"]) for d in f.program.executionPlan[0].delegates]
    assert fallbacks == [1, 2, 3, 4, 5]


def test_identical_weights_of_two_fallbacks_are_stored_once():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = _parsed(delegated_program(weights=[w, w.copy()], blobs=[b"a", b"b"]))
    idx = [
        v.val.dataBufferIdx
        for p in f.program.executionPlan[1:]
        for v in p.values
        if v.valType == K.Tensor and v.val.dataBufferIdx
    ]
    assert len(idx) == 2 and idx[0] == idx[1]


def test_reserved_spec_keys_and_bad_delegates_are_refused():
    with pytest.raises(UnsupportedOpError, match="reserved"):
        lower(delegated_program(specs=[CompileSpec.of("offload.fallback_plan", 3)]))
    p = delegated_program()
    op = p.main.body.operations[0]
    op.attributes["fallback"] = None
    with pytest.raises(UnsupportedOpError, match="fallback"):
        lower(p)
