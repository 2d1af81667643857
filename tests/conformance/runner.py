"""Runs one ONNX backend case through offload and says why it fails (None when it passes)."""

from __future__ import annotations

import os
import warnings

import numpy as np

import offload

from .cases import Case, assert_similar

EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "expected_failures.txt")


def case_id(case: Case) -> str:
    return f"{case.kind}/{case.name}"


def run_case(case: Case, prepare=None) -> str | None:
    """None when offload reproduces every output of the case, else a one-line reason."""
    try:
        program = offload.load(case.model)
        if prepare is not None:
            program = prepare(program)
        for k, (inputs, expected) in enumerate(case.data_sets):
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = offload.evaluate(program, inputs)
            outs = list(got.values())
            if len(outs) != len(expected):
                return f"{len(outs)} outputs, expected {len(expected)}"
            for i, (ref, out) in enumerate(zip(expected, outs)):
                assert_similar(ref, out, case.rtol, case.atol, f"data set {k} output {i}")
    except AssertionError as e:
        return "wrong result: " + " ".join(str(e).split())[:300]
    except offload.errors.OffloadError as e:
        return f"{type(e).__name__}: " + " ".join(str(e).split())[:300]
    except Exception as e:  # a crash is a failure with its own reason, not a test error
        return f"crash {type(e).__name__}: " + " ".join(str(e).split())[:300]
    return None


def load_expected_failures(path: str = EXPECTED_FAILURES) -> dict[str, str]:
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, reason = line.partition("  # ")
                out[key.strip()] = reason.strip()
    return out
