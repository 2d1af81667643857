"""Elementwise ops on an 8-bit tensor folded into one table (runtime/table_fusions.py,
runtime/kernels/table_prepared.py): a streaming model's tail, int8 LOGISTIC then a QUANTIZE
to uint8, against LiteRT and bit for bit against ``offload.evaluate``'s kernels, the folded step
taken; an op outside the table's list (Exp) keeps its own step."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.runtime.kernels.table_prepared import _TableCall
from offload.runtime.steps import _FusedAway, _PreparedStep
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from offload.schemas.generated.tflite.TensorType import TensorType
from tests.frontends.tflite.build import Graph, Op, T, build
from tests.frontends.tflite.litert import litert

X_Q = (0.19, 24)


def _tail(ops: list[int]) -> bytes:
    """x int8 [2, 128] → LOGISTIC (int8, scale 1/256, zero -128) → ``ops`` on it → QUANTIZE to
    uint8 (scale 1/256, zero 0)."""
    tensors = [
        T("x", [2, 128], TensorType.INT8, quant=X_Q),
        T("s", [2, 128], TensorType.INT8, quant=(1 / 256, -128)),
    ]
    body = [Op(BuiltinOperator.LOGISTIC, [0], [1])]
    for op in ops:
        tensors.append(T(f"t{len(tensors)}", [2, 128], TensorType.INT8, quant=(1 / 256, -128)))
        body.append(Op(op, [len(tensors) - 2], [len(tensors) - 1]))
    tensors.append(T("y", [2, 128], TensorType.UINT8, quant=(1 / 256, 0)))
    body.append(Op(BuiltinOperator.QUANTIZE, [len(tensors) - 2], [len(tensors) - 1]))
    return build([Graph(tensors, body, [0], [len(tensors) - 1])])


def _exp_tail() -> bytes:
    """x int8 → LOGISTIC (int8) → DEQUANTIZE → EXP (float32) → QUANTIZE to uint8."""
    tensors = [
        T("x", [2, 128], TensorType.INT8, quant=X_Q),
        T("s", [2, 128], TensorType.INT8, quant=(1 / 256, -128)),
        T("f", [2, 128]),
        T("e", [2, 128]),
        T("y", [2, 128], TensorType.UINT8, quant=(3 / 256, 0)),
    ]
    body = [
        Op(BuiltinOperator.LOGISTIC, [0], [1]),
        Op(BuiltinOperator.DEQUANTIZE, [1], [2]),
        Op(BuiltinOperator.EXP, [2], [3]),
        Op(BuiltinOperator.QUANTIZE, [3], [4]),
    ]
    return build([Graph(tensors, body, [0], [4])])


CASES = {  # the model, and the ops each table folds
    "tail": (_tail([]), [["offload.tflite::Lookup", "onnx::DequantizeLinear", "onnx::QuantizeLinear"]]),
    "tanh in the tail": (
        _tail([BuiltinOperator.TANH]),
        [
            [
                "offload.tflite::Lookup",
                "offload.tflite::Lookup",
                "onnx::DequantizeLinear",
                "onnx::QuantizeLinear",
            ]
        ],
    ),
    # Exp is no table op: the two ops before it fold, Exp and the QuantizeLinear after it run
    "exp between": (_exp_tail(), [["offload.tflite::Lookup", "onnx::DequantizeLinear"]]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_8bit_tail_is_one_table_and_matches_litert(case):
    data, folds = CASES[case]
    program = offload.load(data)
    method = offload.runtime.load(offload.save(offload.optimize(program))).method("forward")
    tables = [s for s in method._steps if type(s) is _PreparedStep and type(s.call) is _TableCall]
    assert [[k.op_name for k in s.kernel.kernels] for s in tables] == folds
    assert sum(type(s) is _FusedAway for s in method._steps) == sum(len(f) - 1 for f in folds)
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)  # every int8 value
    for _ in range(2):
        got = method.run({"x": x})["y"]
        np.testing.assert_array_equal(got, offload.evaluate(program, {"x": x})["y"])  # the kernels' bits
        want = litert(data, {"x": x})["y"]
        assert got.dtype == want.dtype == np.uint8
        assert np.abs(got.astype(np.int64) - want).max() <= 1
