"""The runtime half of the `example` backend: reads a JSON plan, runs it on offload's CPU kernels.

It imports nothing from ``compiler.py``: a machine that only runs .pte files needs only this.
Running the very kernels that ``offload.evaluate`` runs makes its results equal the CPU path's
bit for bit, which is what a reference backend is for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from offload.delegates import Availability, BackendRuntime, CompileSpec
from offload.errors import KernelError, ModelFormatError, OffloadError, UnsupportedOpError
from offload.runtime.kernels import find

from .plan import FORMAT

DISABLE_VAR = "OFFLOAD_EXAMPLE_BACKEND_DISABLE"

# Op types run by handles initialized with compile spec trace=1, in order (tests read it).
TRACE: list[str] = []


class _Context:
    """What a kernel may ask beyond its inputs, answered from the plan (no IR op here)."""

    op = None

    def __init__(self, outputs: list[int | None]):
        self.num_outputs = len(outputs)
        self._outputs = outputs

    def output_wanted(self, i: int) -> bool:
        return i < self.num_outputs and self._outputs[i] is not None

    def out(self, i: int) -> None:
        return None  # no preallocated buffers: kernels allocate, as under offload.evaluate

    def run_block(self, block, args):
        raise UnsupportedOpError("example backend: ops with nested graphs are not supported")


@dataclass
class _Step:
    type: str
    name: str
    kernel: object
    attributes: dict
    inputs: list[int | None]
    outputs: list[int | None]


@dataclass
class Handle:
    """A plan made ready: kernels found, weights kept (zero-copy), the trace switch."""

    inputs: list[int]
    weights: dict[int, np.ndarray]
    steps: list[_Step]
    outputs: list[int]
    trace: bool


def _spec(specs: list[CompileSpec], key: str) -> CompileSpec | None:
    return next((s for s in specs if s.key == key), None)


def _step(op: dict) -> _Step:
    kernel = find("", op["type"])
    if kernel is None:
        raise UnsupportedOpError(f"example backend: no CPU kernel for {op['type']} in this offload")
    return _Step(op["type"], op["name"], kernel, op["attributes"], op["inputs"], op["outputs"])


class ExampleRuntime(BackendRuntime):
    name = "example"

    def is_available(self) -> Availability:
        if os.environ.get(DISABLE_VAR) == "1":
            return Availability(False, f"disabled by {DISABLE_VAR}=1")
        return Availability(True)

    def devices(self) -> list[str]:
        return ["cpu (offload's numpy kernels)"]

    def init(self, processed: bytes, compile_specs: list[CompileSpec], weights: Mapping[str, np.ndarray]):
        try:
            plan = json.loads(processed)
        except ValueError as e:
            raise ModelFormatError(f"example backend: the delegate blob is not a JSON plan: {e}") from None
        if plan.get("format") != FORMAT:
            raise ModelFormatError(
                f"example backend: plan format {plan.get('format')!r}, expected {FORMAT!r}"
            )
        missing = sorted(set(plan["weights"].values()) - set(weights))
        if missing:
            raise ModelFormatError(f"example backend: weights not given: {', '.join(missing)}")
        trace = _spec(compile_specs, "trace")
        return Handle(
            inputs=plan["inputs"],
            weights={int(i): weights[name] for i, name in plan["weights"].items()},
            steps=[_step(op) for op in plan["ops"]],
            outputs=plan["outputs"],
            trace=trace.flag() if trace is not None else False,
        )

    def execute(self, handle: Handle, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(handle.inputs):
            raise OffloadError(f"example backend: expected {len(handle.inputs)} inputs, got {len(inputs)}")
        values = dict(handle.weights)
        values.update(zip(handle.inputs, inputs))
        for step in handle.steps:
            self._run(step, values)
            if handle.trace:
                TRACE.append(step.type)
        return [values[i] for i in handle.outputs]

    def _run(self, step: _Step, values: dict) -> None:
        args = [None if i is None else values[i] for i in step.inputs]
        try:
            result = step.kernel(_Context(step.outputs), *args, **step.attributes)
        except OffloadError:
            raise
        except Exception as e:
            raise KernelError(
                f"example backend: op '{step.name or step.type}' failed: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(result, tuple):
            result = (result,)
        for i, value in zip(step.outputs, result):
            if i is not None:
                values[i] = value
