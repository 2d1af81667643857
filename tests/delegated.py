"""Hand-built programs with offload::Delegate ops, and fake backends, for the delegate tests."""

from __future__ import annotations

import numpy as np

from offload.delegates.backend import Availability, Backend, BackendRuntime, CompileSpec
from offload.ir import Block, DataType, Function, Operation, Program, TensorType, Value

F32 = DataType.FLOAT


def _t(shape) -> TensorType:
    return TensorType(F32, tuple(shape))


def fallback_block(shape, weight: np.ndarray, prefix: str) -> Block:
    """(p) -> Relu(p * w): the partition a backend would take, with its weight as a constant."""
    block = Block(f"{prefix}fallback")
    p = Value(f"{prefix}p", _t(shape))
    block.inputs = [p]
    w = block.add_constant(f"{prefix}w", weight)
    mul = block.append(Operation("Mul", [p, w], output_names=[f"{prefix}t"]))
    mul.outputs[0].type = _t(shape)
    relu = block.append(Operation("Relu", [mul.outputs[0]], output_names=[f"{prefix}r"]))
    relu.outputs[0].type = _t(shape)
    block.outputs = [relu.outputs[0]]
    return block


def delegated_program(
    shape=(2, 3), weights=None, blobs=(b"blob",), backends=("fake",), specs=None
) -> Program:
    """forward(x) = x + D_n(…D_1(x)): one Delegate op per blob, then an Add on the CPU."""
    specs = [CompileSpec.of("k", 1)] if specs is None else specs
    body = Block("main")
    x = Value("x", _t(shape))
    body.inputs = [x]
    current = x
    for k, blob in enumerate(blobs):
        w = weights[k] if weights is not None else np.full(shape, k + 2, np.float32)
        op = Operation(
            "Delegate",
            [current],
            {
                "backend": backends[k % len(backends)],
                "processed": blob,
                "compile_specs": list(specs),
                "fallback": fallback_block(shape, w, f"d{k}/"),
            },
            domain="offload",
            name=f"delegate{k}",
            output_names=[f"y{k}"],
        )
        body.append(op)
        op.outputs[0].type = _t(shape)
        current = op.outputs[0]
    add = body.append(Operation("Add", [current, x], output_names=["z"]))
    add.outputs[0].type = _t(shape)
    body.outputs = [add.outputs[0]]
    return Program({"forward": Function("forward", body, {"": 21, "offload": 1})})


def expected(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    current = x
    for w in weights:
        current = np.maximum(current * w, 0)
    return current + x


class FakeRuntime(BackendRuntime):
    """A backend that runs the fallback's math in numpy and records what it was given."""

    def __init__(self, name="fake", available=True, fail_init=False, result=None):
        self.name = name
        self.available, self.fail_init, self.result = available, fail_init, result
        self.inits: list = []  # (processed, specs, weights)
        self.executes = 0
        self.destroyed: list = []

    def is_available(self) -> Availability:
        return Availability(self.available, "" if self.available else "no fake device here")

    def init(self, processed, compile_specs, weights):
        if self.fail_init:
            raise RuntimeError("fake device is busy")
        self.inits.append((processed, compile_specs, dict(weights)))
        (w,) = weights.values()
        return {"w": w, "id": len(self.inits)}

    def execute(self, handle, inputs):
        self.executes += 1
        if self.result is not None:
            return self.result(inputs)
        return [np.maximum(inputs[0] * handle["w"], 0)]

    def destroy(self, handle):
        self.destroyed.append(handle["id"])


def registry_of(*runtimes: FakeRuntime):
    """A find(name) over these runtimes (what tests patch into the runtime's lookup)."""
    by_name = {r.name: Backend(r.name, compiler=lambda: None, runtime=lambda r=r: r) for r in runtimes}
    return by_name.get
