"""optimize_repeat_ops::cast_optimization."""

import numpy as np
import pytest
from onnx import TensorProto as T

from .helpers import check, model, node, op_types

P = ["optimize_repeat_ops::cast_optimization"]


def _casts(t0, t1, t2, shape=(6,), other_reader=False, then_abs=False):
    nodes = [node("Cast", ["x"], ["w"], to=t1), node("Cast", ["w"], ["c" if then_abs else "y"], to=t2)]
    if then_abs:
        nodes.append(node("Abs", ["c"], ["y"]))
    outputs = {"y": (t2, None)}
    if other_reader:
        nodes.append(node("Neg", ["w"], ["z"]))
        outputs["z"] = (t1, None)
    return model(nodes, {"x": (t0, list(shape))}, outputs)


INT8 = np.array([-128, -7, 0, 1, 100, 127], np.int8)
UINT8 = np.array([0, 1, 7, 128, 200, 255], np.uint8)
F16 = np.array([-65504, -1.5, 0, 2.0**-24, 3.140625, np.inf], np.float16)
F32 = np.array([-3.7, -0.5, 0.0, 0.49, 1e-8, 300.6], np.float32)
BOOL = np.array([True, False, True, True, False, False])


@pytest.mark.parametrize(
    "t0, t1, t2, x, left",
    [
        (T.INT8, T.INT32, T.FLOAT, INT8, 1),
        (T.INT8, T.FLOAT16, T.FLOAT, INT8, 1),
        (T.UINT8, T.INT16, T.UINT8, UINT8, 1),  # x → y: a same-type Cast keeps the names
        (T.FLOAT16, T.FLOAT, T.FLOAT16, F16, 1),
        (T.FLOAT16, T.DOUBLE, T.INT32, np.array([-60000, -1.5, 0, 2.5, 3.75, 1000], np.float16), 1),
        (T.BOOL, T.FLOAT, T.INT64, BOOL, 1),
        (T.INT32, T.INT64, T.INT8, np.array([-300, -129, 0, 127, 128, 70000], np.int32), 1),
    ],
)
def test_cast_after_a_widening_reads_the_original(t0, t1, t2, x, left):
    out = check(_casts(t0, t1, t2), P, {"x": x}, rtol=0, atol=0)
    assert op_types(out).get("Cast", 0) == left


@pytest.mark.parametrize(
    "t0, t1, t2, x",
    [
        (T.FLOAT, T.BOOL, T.FLOAT16, F32),  # keeps only 0 / 1
        (T.INT32, T.INT8, T.UINT8, np.array([-5, 0, 100, 127, 128, 255], np.int32)),
        (T.FLOAT, T.FLOAT16, T.FLOAT, F32),  # rounds
        (T.FLOAT, T.INT32, T.FLOAT, F32),  # truncates
        (T.UINT8, T.INT8, T.FLOAT, UINT8),  # 200 becomes -56
        (T.INT16, T.FLOAT16, T.FLOAT, np.array([-30000, -2049, 0, 2049, 4097, 30001], np.int16)),
        (T.FLOAT16, T.BFLOAT16, T.FLOAT, np.array([-1.5, 0, 2.0**-24, 3.140625, 1.001, 7], np.float16)),
    ],
)
def test_lossy_first_cast_stays(t0, t1, t2, x):
    out = check(_casts(t0, t1, t2), P, {"x": x}, rtol=0, atol=0)
    assert op_types(out)["Cast"] == 2


@pytest.mark.parametrize("t0, t1, x", [(T.UINT8, T.INT16, UINT8), (T.FLOAT16, T.FLOAT, F16)])
def test_widening_and_back_is_nothing(t0, t1, x):
    out = check(_casts(t0, t1, t0, then_abs=True), P, {"x": x}, rtol=0, atol=0)
    assert op_types(out) == {"Abs": 1}


def test_first_cast_keeps_its_other_readers():
    out = check(_casts(T.INT8, T.INT32, T.FLOAT, other_reader=True), P, {"x": INT8}, rtol=0, atol=0)
    assert op_types(out) == {"Cast": 2, "Neg": 1}
    y = next(op for op in out.main.body.operations if op.outputs[0].name == "y")
    assert y.inputs[0].name == "x"
