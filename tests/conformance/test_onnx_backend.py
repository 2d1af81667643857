"""ONNX's backend node tests and on-disk model tests, run by offload.evaluate and through .pte.

The .pte path (save → runtime.load → run) must also equal offload.evaluate bit for bit.
"""

import pytest

from tests.delegates.opencl_support import needs_opencl

from .cases import light_cases, model_cases, node_cases
from .runner import PATHS, case_id, load_expected_failures, run_case

CASES = node_cases() + model_cases() + light_cases()
EXPECTED = load_expected_failures()
TALLY: dict[tuple[str, str], list[int]] = {}
# Listed cases whose expected data is itself an unseeded random draw: nothing can match it.
NONDETERMINISTIC = "nondeterministic:"


def _count(path: str, kind: str, passed: bool) -> None:
    t = TALLY.setdefault((path, kind), [0, 0])
    t[0] += passed
    t[1] += 1


_MARKS = {"cuda": pytest.mark.cuda, "opencl": needs_opencl}


@pytest.mark.parametrize("case", CASES, ids=case_id)
# The cuda path is marked too: `pytest -m cuda` on a GPU machine runs the suite on the device.
# The opencl path needs a device that builds kernels (needs_opencl says why not, when not).
@pytest.mark.parametrize("path", [pytest.param(p, marks=_MARKS[p]) if p in _MARKS else p for p in PATHS])
def test_onnx_case(path, case):
    key = case_id(case)
    if f"{path}:{key}" in EXPECTED:  # a failure of one path only
        key = f"{path}:{key}"
    if EXPECTED.get(key, "").startswith(NONDETERMINISTIC):
        _count(path, case.kind, False)
        pytest.skip(EXPECTED[key])
    reason = run_case(case, path)
    _count(path, case.kind, reason is None)
    if key in EXPECTED:
        if reason is None:
            pytest.fail(f"{key} passes now: remove it from tests/conformance/expected_failures.txt")
        pytest.xfail(EXPECTED[key])
    assert reason is None, reason


def test_expected_failures_name_real_cases():
    known = {case_id(c) for c in CASES}
    known |= {f"{p}:{k}" for p in PATHS for k in known}
    stale = sorted(set(EXPECTED) - known)
    assert not stale, f"expected_failures.txt lists cases that no longer exist: {stale[:10]}"
