"""The compile half of the `example` backend: the float32 ops it takes, and preprocess → JSON plan."""

from __future__ import annotations

import json

from offload.delegates import BackendCompiler, CompileSpec, OpCapability, PreprocessResult, Support
from offload.errors import UnsupportedOpError
from offload.ir import DataType, Operation, Program, Value, attributes_of

from .plan import FORMAT

_F32 = frozenset({DataType.FLOAT})
# Shape-like operands (Reshape's shape, Unsqueeze's axes) are int64; the data stays float32.
_F32_I64 = frozenset({DataType.FLOAT, DataType.INT64})

_ELEMENTWISE = [
    *("Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "Sum", "Identity", "Clip"),
    *("Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Erf"),
    *("Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Gelu"),
]

CAPABILITIES: dict[str, OpCapability] = {
    **{op: OpCapability(_F32, max_rank=6) for op in _ELEMENTWISE},
    "MatMul": OpCapability(_F32, max_rank=4),
    "Gemm": OpCapability(_F32, max_rank=2),
    # 2-D convolution and pooling only (rank 4, NCHW), explicit padding only.
    "Conv": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",)}),
    "MaxPool": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",), "storage_order": (0,)}),
    "AveragePool": OpCapability(_F32, max_rank=4, attributes={"auto_pad": ("NOTSET",)}),
    "GlobalAveragePool": OpCapability(_F32, max_rank=4),
    "GlobalMaxPool": OpCapability(_F32, max_rank=4),
    "BatchNormalization": OpCapability(_F32, max_rank=4, attributes={"training_mode": (0,)}),
    "Softmax": OpCapability(_F32, max_rank=4),
    "LogSoftmax": OpCapability(_F32, max_rank=4),
    "Reshape": OpCapability(_F32_I64, max_rank=6, attributes={"allowzero": (0,)}),
    "Flatten": OpCapability(_F32, max_rank=6),
    "Transpose": OpCapability(_F32, max_rank=6),
    "Concat": OpCapability(_F32, max_rank=6),
    "Squeeze": OpCapability(_F32_I64, max_rank=6),
    "Unsqueeze": OpCapability(_F32_I64, max_rank=6),
}


def _plain(value) -> bool:
    """Whether an attribute value fits in JSON as is (tensor and graph attributes do not)."""
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


class _Ids:
    """Numbers the values of a partition in the order the plan first meets them."""

    def __init__(self):
        self._ids: dict[int, int] = {}

    def __call__(self, v: Value | None) -> int | None:
        if v is None:
            return None
        return self._ids.setdefault(id(v), len(self._ids))

    def known(self, v: Value) -> bool:
        return id(v) in self._ids


SPEC_KEYS = {"trace": "0/1: record the op types each execute runs (offload_example_backend.runtime.TRACE)"}


class ExampleCompiler(BackendCompiler):
    name = "example"
    spec_keys = SPEC_KEYS
    capabilities = CAPABILITIES

    def supports(self, op: Operation, ctx=None) -> Support:
        found = super().supports(op, ctx)
        if not found:
            return found
        for name, value in op.attributes.items():
            if not _plain(value):
                return Support(
                    False, f"attribute '{name}' is a tensor or graph, which a JSON plan cannot hold"
                )
        for out in op.outputs:
            dtype = getattr(out.type, "dtype", None)
            if dtype is not None and dtype != DataType.FLOAT:
                return Support(
                    False, f"output '{out.name}' is {dtype.short}; this backend computes float32 only"
                )
        return Support(True)

    def preprocess(self, subprogram: Program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        self.check_specs(compile_specs)
        body = subprogram.main.body
        ids = _Ids()
        plan = {"format": FORMAT, "inputs": [ids(v) for v in body.inputs], "weights": {}, "ops": []}
        debug_map: dict[int, tuple[int, ...]] = {}
        for v in body.constants.values():
            plan["weights"][str(ids(v))] = v.name
        for step, op in enumerate(body.operations):
            plan["ops"].append(self._op(op, ids, plan["weights"]))
            debug_map[step] = (step,)
        plan["outputs"] = [ids(v) for v in body.outputs]
        return PreprocessResult(json.dumps(plan, indent=1).encode(), debug_map)

    def _op(self, op: Operation, ids: _Ids, weights: dict[str, str]) -> dict:
        support = self.supports(op)
        if not support:
            raise UnsupportedOpError(f"example backend: op '{op.name or op.op_type}': {support.reason}")
        for v in op.inputs:
            # A constant the block does not list is still a weight: init gets it by name.
            if v is not None and v.is_constant and not ids.known(v):
                weights[str(ids(v))] = v.name
        attributes = attributes_of(op)
        return {
            "type": op.op_type,
            "name": op.name,
            "attributes": attributes,
            "inputs": [ids(v) for v in op.inputs],
            # The CPU evaluator treats an unnamed output as not wanted; the plan keeps that.
            "outputs": [ids(v) if v.name else None for v in op.outputs],
        }
