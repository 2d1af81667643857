"""Make the stateful Core ML fixture state/accumulator.mlpackage with coremltools' MIL builder.

An iOS18 program with one fp16 state ``acc`` (2×3): each call adds its input ``x`` to the
state and returns 2·(acc + x) and acc·x (acc as the call found it). (A second read_state after
the update would be merged with the first by coremltools' passes, so the program does not make one.) The oracle in state/accumulator.npz
is numpy's: the calls' inputs ``in:x@k`` and outputs ``out:<name>@k`` for k = 0, 1, 2 from a
zero state (Core ML's initial state), then ``reset`` and call 0's input again (``@reset``).

    /tmp/ctvenv/bin/python tests/frontends/coreml/generate_state.py   (coremltools 9.0)
"""

from __future__ import annotations

import os
import shutil
import warnings

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state")


@mb.program(
    input_specs=[mb.StateTensorSpec((2, 3), dtype=types.fp16), mb.TensorSpec((2, 3), dtype=types.fp16)],
    opset_version=ct.target.iOS18,
)
def accumulator(acc, x):
    before = mb.read_state(input=acc)
    total = mb.add(x=before, y=x)
    mb.coreml_update_state(state=acc, value=total)
    return mb.mul(x=total, y=np.float16(2.0), name="doubled"), mb.mul(x=before, y=x, name="scaled")


def main() -> None:
    os.makedirs(HERE, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.convert(accumulator, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18)
    path = os.path.join(HERE, "accumulator.mlpackage")
    shutil.rmtree(path, ignore_errors=True)
    model.save(path)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((2, 3)).astype(np.float16) for _ in range(3)]
    acc = np.zeros((2, 3), np.float16)
    arrays = {}
    for k, x in enumerate(xs):
        total = (acc + x).astype(np.float16)
        arrays[f"in:x@{k}"] = x
        arrays[f"out:doubled@{k}"] = (total * np.float16(2)).astype(np.float16)
        arrays[f"out:scaled@{k}"] = (acc * x).astype(np.float16)
        acc = total
    arrays["in:x@reset"] = xs[0]
    arrays["out:doubled@reset"] = (xs[0] * np.float16(2)).astype(np.float16)
    arrays["out:scaled@reset"] = np.zeros((2, 3), np.float16)
    np.savez(os.path.join(HERE, "accumulator.npz"), **arrays)
    print(model._mil_program)


if __name__ == "__main__":
    main()
