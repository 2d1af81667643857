"""``calibrate``: the ranges a program's float values take on sample inputs, kept on their types.

Mixed precision (``precision=fp16`` on the GPU backends) stores a value as half only when its
range fits. Bounds proven by interval arithmetic (``offload.ir.ranges``) are safe but, through
deep stacks of convolutions, far above what real inputs reach; a calibration run records what
the values do reach on representative inputs. The CPU executor runs each sample and every op
output's extremes are kept (``ValueRange(observed=True)``); the GPU backends widen a range seen
this way by a margin (``delegates/gpu/precision.py``), and the fp16 guard (``fp16_check=1``)
catches an input that goes further still.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

import numpy as np

from offload.errors import OffloadError
from offload.ir import Program, TensorType, Value
from offload.ir.clone import clone_program
from offload.ir.ranges import annotate, is_float
from offload.ir.types import ValueRange

MAX_SAMPLES = 10_000  # a calibration set is a few dozen inputs; more is a mistake


def calibrate(
    program: Program,
    samples: Iterable[Mapping[str, np.ndarray]] = (),
    *,
    input_ranges: Mapping[str, tuple[float, float]] | None = None,
) -> Program:
    """A copy of ``program`` whose float values carry ranges: the extremes seen when its first
    function runs on ``samples`` (dicts of input name → array), and for what the samples never
    reach (constants, an untaken branch) bounds proven from ``input_ranges`` (input name →
    (lo, hi); inputs not named are unbounded). ``to_backend(..., calibration=samples)`` does
    this itself on the program it partitions."""
    copy = clone_program(program)
    if input_ranges:
        annotate(copy, input_ranges)  # the inputs' given ranges first: seen ones never narrow them
    record(copy, samples)
    annotate(copy)
    return copy


def record(program: Program, samples: Iterable[Mapping[str, np.ndarray]]) -> int:
    """Run ``samples`` through ``program`` on the CPU (in place): every float value that a sample
    reaches gets the extremes seen over all of them; returns the number of samples run."""
    from offload.runtime import evaluate

    fn = program.main
    seen: dict[int, list] = {}  # id(value) → [value, lo, hi]

    def observe(v: Value, array) -> None:
        if not is_float(v) or not isinstance(array, np.ndarray) or array.size == 0:
            return
        with np.errstate(invalid="ignore"):
            lo, hi = float(np.min(array)), float(np.max(array))
        if np.isnan(lo) or np.isnan(hi):
            lo, hi = -np.inf, np.inf
        entry = seen.setdefault(id(v), [v, lo, hi])
        entry[1], entry[2] = min(entry[1], lo), max(entry[2], hi)

    count = 0
    for sample in samples:
        count += 1
        if count > MAX_SAMPLES:
            raise OffloadError(f"calibrate: more than {MAX_SAMPLES} samples; a few dozen suffice")
        if not isinstance(sample, Mapping):
            raise OffloadError(
                f"calibrate: sample {count} is a {type(sample).__name__}, not a dict of input name → array"
            )
        for v in fn.inputs:
            if v.name in sample:
                observe(v, np.asarray(sample[v.name]))
        evaluate(program, sample, observe=observe)
    for v, lo, hi in seen.values():
        given = v.type.range
        if given is not None and not given.observed:  # a given input range stays
            continue
        v.type = TensorType(v.type.dtype, v.type.shape, v.type.quant, ValueRange(lo, hi, observed=True))
    return count


FP16_ERROR = "fp16_error"  # the Delegate attribute (and reserved compile spec) holding the measure


def measure_fp16_error(lowered: Program, samples: list[Mapping[str, np.ndarray]]) -> int:
    """Each delegate compiled with ``precision=fp16``, run on its backend with the inputs it gets
    from ``samples``, against its float32 fallback on the same inputs: per output, the largest
    absolute error and the largest magnitude of the float32 result, kept as the Delegate's
    ``fp16_error`` attribute (JSON; `offload inspect` shows it). Delegates whose backend cannot
    run here are left unmeasured. Returns how many were measured."""
    import json

    from offload.delegates import registry
    from offload.runtime import evaluate

    def stores_half(op) -> bool:
        backend = registry.find(op.attributes["backend"])
        return backend is not None and backend.compiler().stores_half(op.attributes["compile_specs"])

    wanted = [
        op for op in lowered.main.body.walk() if op.qualified_type == "offload::Delegate" and stores_half(op)
    ]
    if not wanted or not samples:
        return 0
    handles = {}
    for op in wanted:
        backend = registry.find(op.attributes["backend"])
        runtime = backend.runtime() if backend is not None else None
        if runtime is None or not runtime.is_available():
            continue
        weights = {n: v.const_value for n, v in op.attributes["fallback"].constants.items()}
        handles[id(op)] = (
            runtime,
            runtime.init(op.attributes["processed"], op.attributes["compile_specs"], weights),
        )
    errors = {id(op): [[0.0, 0.0] for _ in op.outputs] for op in wanted}  # per output: max error, scale
    try:
        for sample in samples:
            seen: dict[int, np.ndarray] = {id(v): np.asarray(sample[v.name]) for v in lowered.main.inputs}
            evaluate(lowered, sample, observe=partial(_keep, seen))
            for op in wanted:
                if id(op) not in handles:
                    continue
                runtime, handle = handles[id(op)]
                ins = [v.const_value if v.is_constant else seen[id(v)] for v in op.inputs]
                got = runtime.execute(handle, ins)
                for k, (g, out) in enumerate(zip(got, op.outputs)):
                    want = seen.get(id(out))
                    if want is None or np.asarray(want).dtype.kind != "f" or not np.size(want):
                        continue
                    with np.errstate(invalid="ignore", over="ignore"):
                        err = float(np.max(np.abs(np.asarray(g, np.float64) - want)))
                    entry = errors[id(op)][k]
                    entry[0] = max(entry[0], err) if not np.isnan(err) else np.inf
                    entry[1] = max(entry[1], float(np.max(np.abs(want))))
    finally:
        for runtime, handle in handles.values():
            runtime.destroy(handle)
    for op in wanted:
        if id(op) in handles:
            outputs = [
                {"name": v.name, "max_abs": e[0], "scale": e[1]} for v, e in zip(op.outputs, errors[id(op)])
            ]
            op.attributes[FP16_ERROR] = json.dumps({"samples": len(samples), "outputs": outputs})
    return len(handles)


def _keep(seen: dict, v: Value, array) -> None:
    seen[id(v)] = array
