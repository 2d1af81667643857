"""quantization::fp16_compute_in_fp32 — float16 ops compute in float32; the interface stays float16.

The reverse of ``add_fp16_cast``, for programs that compute in float16 (Core ML's default
``compute_precision``, fp16 ONNX exports): every op of ``add_fp16_cast.FP16_OPS`` whose float
values are all float16 is rebuilt on float32 (float16 constants converted once, other values
through one ``Cast(to=FLOAT)``) and its result cast back to float16. Then each
``Cast(float32 → float16) → Cast(float16 → float32)`` pair is removed — on purpose, since that
pair rounds (it is not the exact pair ``cast_optimization`` removes): a chain of such ops runs
wholly in float32, rounding to float16 only where the chain hands a value to an op outside the
table or to an output. Results differ from a float16 run by float16's rounding (they are closer
to the float32 model's); the GPU backends, which compute float32, take the ops this way (their
``precision=fp16`` compile spec stores tensors as half again where memory matters).

Before::

    %h: (1,8,fp16) = Cast(input=%x, to=10)
    %y: (1,8,fp16) = Relu(X=%h)

After::

    %r: (1,8,fp32) = Relu(X=%x)
    %y: (1,8,fp16) = Cast(input=%r, to=10)
"""

from __future__ import annotations

from offload.ir import DataType, Operation, Program, TensorType, Value

from ..cleanup.dead_code_elimination import dead_code_elimination
from ..pattern import Rewriter
from ..registry import graph_pass
from .add_fp16_cast import FP16_OPS, rebuilt_in

F32, F16 = DataType.FLOAT, DataType.FLOAT16


def _dtype(v: Value | None) -> DataType | None:
    return v.type.dtype if v is not None and isinstance(v.type, TensorType) else None


def _is_cast(op: Operation | None, to: DataType) -> bool:
    return op is not None and op.op_type == "Cast" and not op.domain and op.attributes.get("to") == int(to)


@graph_pass("quantization::fp16_compute_in_fp32")
def fp16_compute_in_fp32(program: Program) -> bool:
    rw = Rewriter(program)
    cache: dict = {}
    changed = False
    for block, op in rw.ops():
        if op.op_type not in FP16_OPS or op.domain or len(op.outputs) != 1 or op.blocks:
            continue
        floats = [
            _dtype(v)
            for v in (*op.inputs, op.outputs[0])
            if _dtype(v) is not None and _dtype(v).numpy.kind == "f"
        ]
        if not floats or any(t != F16 for t in floats):
            continue
        changed |= rebuilt_in(rw, block, op, F16, F32, cache)
    if changed:
        for block, op in rw.ops():  # float32 → float16 → float32: keep the float32 value
            inner = op.inputs[0].producer if _is_cast(op, F32) and op.inputs[0] is not None else None
            if _is_cast(inner, F16) and _dtype(inner.inputs[0]) == F32:
                rw.substitute(op.outputs[0], inner.inputs[0], block)
        dead_code_elimination(program)
    return changed
