"""Bounded runs: ``RunOptions`` deadlines and stop flags end runs that would not end by themselves."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import offload
from offload import runtime
from offload.errors import RunTerminated
from offload.runtime import RunOptions
from offload.schemas import pte
from offload.schemas.generated.executorch_flatbuffer import Instruction, JumpFalseCall
from offload.schemas.generated.executorch_flatbuffer.InstructionArguments import InstructionArguments as IA
from tests.delegates.opencl_support import model


def _huge_loop():
    """for i in range(10**12): acc = acc + 1 — it would run for days."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["acc", "one"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
        ],
    )
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)]
    inits = [("M", np.array(10**12, np.int64)), ("one", np.float32(1))]
    return runtime.load(offload.save(model(nodes, [("x", [2])], ["y"], inits)))


def test_a_deadline_stops_a_loop_with_a_huge_trip_count():
    module = _huge_loop()
    x = np.zeros(2, np.float32)
    with pytest.raises(RunTerminated, match=r"0\.2 s deadline"):
        module.run({"x": x}, RunOptions(timeout=0.2))
    # The module is whole afterwards: a run that ends by itself still works.
    small = runtime.load(offload.save(model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], ["y"])))
    np.testing.assert_array_equal(small.run({"x": -x}, RunOptions(timeout=5))["y"], np.zeros(2, np.float32))


def test_another_thread_can_terminate_a_run():
    module = _huge_loop()
    options = RunOptions()
    errors = []

    def run():
        try:
            module.run({"x": np.zeros(2, np.float32)}, options)
        except RunTerminated as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    options.terminate = True
    t.join(timeout=10)
    assert not t.is_alive() and len(errors) == 1 and "terminated" in str(errors[0])


def test_a_pte_whose_jumps_never_end_stops_at_the_deadline():
    """A hostile file: its first instruction jumps to itself on the constant false (value 1)."""
    data = offload.save(model([helper.make_node("Relu", ["x"], ["y"])], [("x", [2])], ["y"]))
    parsed = pte.parse(data)
    program = parsed.program
    chain = program.executionPlan[0].chains[0]
    jump = JumpFalseCall.JumpFalseCallT()
    jump.condValueIndex, jump.destinationInstruction = 1, 0
    forever = Instruction.InstructionT()
    forever.instrArgsType, forever.instrArgs = IA.JumpFalseCall, jump
    chain.instructions.insert(0, forever)
    chain.stacktrace = None
    hostile = pte.serialize(program, [bytes(s) for s in parsed.segments])
    module = runtime.load(hostile)
    start = time.monotonic()
    with pytest.raises(RunTerminated, match="deadline"):
        module.run({"x": np.ones(2, np.float32)}, RunOptions(timeout=0.3))
    assert time.monotonic() - start < 5


def test_a_timeout_must_be_positive():
    module = _huge_loop()
    with pytest.raises(ValueError, match="positive"):
        module.run({"x": np.zeros(2, np.float32)}, RunOptions(timeout=0))
