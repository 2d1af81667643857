"""Make the single-op Core ML fixtures in ops/ with coremltools' MIL builder.

Each case is a MIL program of one op (or a few) written with ``coremltools.converters.mil.Builder``
and saved as an ML program (``ops/<case>.mlpackage``), beside ``ops/<case>.npz`` holding its
inputs (``in:<name>``) and a numpy reference of its outputs (``out:<name>``), computed here from
MIL's definition of the op, not by running the model. coremltools is not a dependency of offload
or of its tests: this script runs in a separate virtualenv and its small files are committed.

    python3 -m venv /tmp/ctvenv && /tmp/ctvenv/bin/pip install coremltools==9.0 torch numpy
    /tmp/ctvenv/bin/python tests/frontends/coreml/generate_ops.py            # every case
    /tmp/ctvenv/bin/python tests/frontends/coreml/generate_ops.py gelu_tanh  # some of them

The committed files were made with coremltools 9.0 (on Linux, where it converts but cannot run a
model). The cases live in ``cases_*.py`` beside this script, one module per op family; each
module has ``CASES``, a list of ``Case``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = os.path.join(HERE, "ops")
FAMILIES = ["cases_math", "cases_tensor", "cases_sequence", "cases_control"]


@dataclass
class Case:
    """One fixture: ``build(**inputs)`` (parameters named as ``inputs``, using the MIL builder
    ``mb``) returns the program's outputs; ``reference(**inputs)`` their numpy values (a list, in
    the same order)."""

    name: str
    inputs: dict[str, np.ndarray]
    build: Callable
    reference: Callable
    opset: str = "iOS15"  # the minimum deployment target: iOS15 … iOS18
    fp16: bool = False  # compute precision fp16 (fp32 otherwise)
    tolerance: float = 1e-5  # relative, on the largest |reference|
    input_specs: dict = field(default_factory=dict)  # name → mb.TensorSpec (default: the array's)
    passes: bool = True  # False: coremltools' MIL passes do not run (the program is saved as built)


def save(case: Case) -> None:
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    dtypes = {np.float32: types.fp32, np.float16: types.fp16, np.int32: types.int32, np.bool_: types.bool}
    specs = [
        case.input_specs.get(k) or mb.TensorSpec(shape=v.shape, dtype=dtypes[v.dtype.type])
        for k, v in case.inputs.items()
    ]
    target = getattr(ct.target, case.opset)

    prog = mb.program(input_specs=specs, opset_version=target)(case.build)  # inputs named as build's
    precision = ct.precision.FLOAT16 if case.fp16 else ct.precision.FLOAT32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target,
            compute_precision=precision,
            **({} if case.passes else {"pass_pipeline": ct.PassPipeline.EMPTY}),
        )
    path = os.path.join(OPS, f"{case.name}.mlpackage")
    shutil.rmtree(path, ignore_errors=True)
    model.save(path)
    outputs = [o.name for o in model.get_spec().description.output]
    expected = case.reference(**case.inputs)
    if len(expected) != len(outputs):
        raise SystemExit(f"{case.name}: {len(outputs)} outputs, the reference gives {len(expected)}")
    arrays = {f"in:{k}": v for k, v in case.inputs.items()}
    arrays.update({f"out:{k}": np.asarray(v) for k, v in zip(outputs, expected)})
    arrays["tolerance"] = np.float64(case.tolerance)
    np.savez(os.path.join(OPS, f"{case.name}.npz"), **arrays)


def all_cases() -> list[Case]:
    sys.path.insert(0, HERE)
    cases = []
    for family in FAMILIES:
        if os.path.exists(os.path.join(HERE, f"{family}.py")):
            cases.extend(importlib.import_module(family).CASES)
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit(f"case names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    return cases


def main(argv: list[str]) -> None:
    os.makedirs(OPS, exist_ok=True)
    wanted = set(argv)
    for case in all_cases():
        if not wanted or case.name in wanted or any(case.name.startswith(w) for w in wanted):
            save(case)
            print("wrote", case.name)


if __name__ == "__main__":
    main(sys.argv[1:])
