"""quantization::add_fp16_cast — float32 ops compute in float16; the interface stays float32.

Not in the default pipeline: it changes numerics on purpose. Rule: every op of the table
``FP16_OPS`` (one output; every float input and the output of one type T in its ONNX schema)
that reads or writes float32 is rebuilt to read float16 (constants converted once, other
values through one ``Cast(to=FLOAT16)`` each) and its result is cast back to float32. Then
Cast(float16 → float32) → Cast(float32 → float16) pairs between two such ops cancel
(``cast_optimization``: widening and back is exact), so a chain of table ops runs wholly in
float16 with casts only at its edges, and the function's inputs and outputs keep float32.
Ops outside the table (Resize's float scales, Cast, integer ops …) stay in float32.

``output_errors(reference, fp16_program, feeds)`` reports, per output, the largest absolute and
relative error of the float16 program against the float32 one.

Before::

    %c: (1,8,5,5,fp32) = Conv(X=%x, W=%w)
    %y: (1,8,5,5,fp32) = Relu(X=%c)

After::

    %x16: (1,3,7,7,fp16) = Cast(input=%x, to=10)
    %c16: (1,8,5,5,fp16) = Conv(X=%x16, W=%w_fp16)
    %r16: (1,8,5,5,fp16) = Relu(X=%c16)
    %y: (1,8,5,5,fp32) = Cast(input=%r16, to=1)
"""

from __future__ import annotations

import numpy as np

from offload.ir import Block, DataType, Operation, Program, TensorType, Value

from ..cleanup.dead_code_elimination import dead_code_elimination
from ..optimize_repeat_ops.cast_optimization import cast_optimization
from ..pattern import Rewriter
from ..registry import graph_pass

# Ops whose float inputs and output are all of one type T (so all may be float16 together).
FP16_OPS = frozenset(
    [
        "Abs",
        "Add",
        "AveragePool",
        "BatchNormalization",
        "Ceil",
        "Clip",
        "Concat",
        "Conv",
        "ConvTranspose",
        "DepthToSpace",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Log",
        "LogSoftmax",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "Min",
        "Mul",
        "Neg",
        "Pad",
        "Pow",
        "PRelu",
        "Reciprocal",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Round",
        "Selu",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Softplus",
        "SpaceToDepth",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "ThresholdedRelu",
        "Tile",
        "Transpose",
        "Unsqueeze",
        "Where",
    ]
)
F32, F16 = DataType.FLOAT, DataType.FLOAT16


def _is(v: Value | None, dtype: DataType) -> bool:
    return v is not None and isinstance(v.type, TensorType) and v.type.dtype == dtype


def converted(rw: Rewriter, block: Block, v: Value, to: DataType, anchor: Operation, cache: dict) -> Value:
    """``v`` as float type ``to``: a constant converted once, another value through one Cast."""
    key = (id(block), id(v), to)
    if key not in cache:
        stem = f"{v.name}_{to.short}"
        if v.const_value is not None:
            cache[key] = rw.constant(block, v.const_value.astype(to.numpy), stem=stem)
        else:
            cache[key] = rw.build(block, "Cast", [v], {"to": int(to)}, before=anchor, stem=stem).outputs[0]
    return cache[key]


def rebuilt_in(rw: Rewriter, block: Block, op: Operation, old: DataType, new: DataType, cache: dict) -> bool:
    """``op`` rebuilt to read and write float type ``new`` where it read ``old``, its result cast
    back to ``old`` for its readers; False (nothing changed) when the rebuilt op does not give
    ``new`` or the function's output names cannot be kept."""
    inputs = [converted(rw, block, v, new, op, cache) if _is(v, old) else v for v in op.inputs]
    stem = op.outputs[0].name
    moved = rw.build(block, op.op_type, inputs, dict(op.attributes), before=op, stem=f"{stem}_{new.short}")
    if not _is(moved.outputs[0], new):
        block.remove(moved)
        return False
    back = rw.build(block, "Cast", [moved.outputs[0]], {"to": int(old)}, before=op, stem=stem)
    if rw.replace_op(op, back):
        rw.drop(op)
        return True
    rw.drop(moved)
    return False


@graph_pass("quantization::add_fp16_cast")
def add_fp16_cast(program: Program) -> bool:
    rw = Rewriter(program)
    cache: dict = {}
    changed = False
    for block, op in rw.ops():
        if op.op_type not in FP16_OPS or op.domain or len(op.outputs) != 1 or op.blocks:
            continue
        if not any(_is(v, F32) for v in (*op.inputs, op.outputs[0])):
            continue
        if any(
            v is not None
            and not _is(v, F32)
            and isinstance(v.type, TensorType)
            and v.type.dtype.numpy.kind == "f"
            for v in op.inputs
        ):
            continue  # another float type already: leave the op as it is
        changed |= rebuilt_in(rw, block, op, F32, F16, cache)
    if changed:
        cast_optimization(program)
        dead_code_elimination(program)
    return changed


def output_errors(reference: Program, candidate: Program, feeds: dict) -> dict[str, dict[str, float]]:
    """Per output of ``reference``: the largest absolute error of ``candidate``'s result against
    it, and that error relative to the largest magnitude of the reference result."""
    from offload.runtime import evaluate

    want, got = evaluate(reference, feeds), evaluate(candidate, feeds)
    out = {}
    for name, w in want.items():
        w64, g64 = np.asarray(w, np.float64), np.asarray(got[name], np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(w64 == g64, 0.0, np.abs(g64 - w64))
        top = float(np.max(np.abs(w64))) if w64.size else 0.0
        worst = float(diff.max()) if diff.size else 0.0
        out[name] = {"max_abs": worst, "max_rel": worst / top if top else 0.0}
    return out
