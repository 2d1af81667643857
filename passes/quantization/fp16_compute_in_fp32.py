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

from offload.ir import Block, DataType, Operation, Program, TensorType, Value

from ..cleanup.dead_code_elimination import dead_code_elimination
from ..pattern import Rewriter
from ..registry import graph_pass
from .add_fp16_cast import FP16_OPS, converted, rebuilt_in

F32, F16 = DataType.FLOAT, DataType.FLOAT16


def _dtype(v: Value | None) -> DataType | None:
    return v.type.dtype if v is not None and isinstance(v.type, TensorType) else None


def _is_cast(op: Operation | None, to: DataType) -> bool:
    return op is not None and op.op_type == "Cast" and not op.domain and op.attributes.get("to") == int(to)


# Ops that read float16 and give no float: comparisons, tests, indices. They read float32 instead,
# their results unchanged in type.
READS_FLOAT = frozenset(
    ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "IsInf", "IsNaN", "ArgMax", "ArgMin"]
)


def _to_float32(rw: Rewriter, block: Block, op: Operation, cache: dict) -> bool:
    """A reader of float16 (``READS_FLOAT``, or a Cast from float16) rebuilt to read float32; a
    Cast of an integer or bool to float16 rebuilt as a Cast to float32, cast back to float16."""
    made = None
    if op.op_type == "Cast" and _dtype(op.outputs[0]) == F16:
        if _dtype(op.inputs[0]) in (F16, F32, None):
            return False  # Cast to float16 of a float: cast_optimization's, or the pass's own edge
        wide = rw.build(
            block, "Cast", [op.inputs[0]], {"to": int(F32)}, before=op, stem=f"{op.outputs[0].name}_fp32"
        )
        new = rw.build(block, "Cast", [wide.outputs[0]], {"to": int(F16)}, before=op, stem=op.outputs[0].name)
        made = wide
    else:
        floats = [_dtype(o) for o in op.outputs if _dtype(o) is not None and _dtype(o).numpy.kind == "f"]
        if not any(_dtype(v) == F16 for v in op.inputs) or floats:
            return False  # a Cast of float16 to a float is the pass's own edge
        inputs = [converted(rw, block, v, F32, op, cache) if _dtype(v) == F16 else v for v in op.inputs]
        new = rw.build(block, op.op_type, inputs, dict(op.attributes), before=op, stem=op.outputs[0].name)
    if rw.replace_op(op, new):
        rw.drop(op)
        return True
    if made is not None:
        rw.drop(made)  # the Cast to float32 made above, read by nothing now
    return False


@graph_pass("quantization::fp16_compute_in_fp32")
def fp16_compute_in_fp32(program: Program) -> bool:
    rw = Rewriter(program)
    cache: dict = {}
    changed = False
    for block, op in rw.ops():
        if op.domain or len(op.outputs) != 1 or op.blocks:
            continue
        if op.op_type in READS_FLOAT or op.op_type == "Cast":
            changed |= _to_float32(rw, block, op, cache)
            continue
        if op.op_type not in FP16_OPS:
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
