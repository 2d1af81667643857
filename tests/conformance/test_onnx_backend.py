"""ONNX's backend node tests and on-disk model tests, run by offload.evaluate and through .pte.

The .pte path (save → runtime.load → run) must also equal offload.evaluate bit for bit.
"""

import pytest

from tests.delegates.opencl_support import needs_opencl

from .cases import light_cases, model_cases, node_cases
from .runner import PATHS, RAN_ON, case_id, load_expected_failures, run_case

CASES = node_cases() + model_cases() + light_cases()
EXPECTED = load_expected_failures()
# (path, kind, where it ran) → [passed, total]: a cuda case that ran its CPU fallback is counted
# apart from one that ran on a device.
TALLY: dict[tuple[str, str, str], list[int]] = {}
# Listed cases whose expected data is itself an unseeded random draw: nothing can match it.
NONDETERMINISTIC = "nondeterministic:"


def _count(path: str, kind: str, passed: bool, ran_on: str) -> None:
    t = TALLY.setdefault((path, kind, ran_on), [0, 0])
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
        _count(path, case.kind, False, "not run")
        pytest.skip(EXPECTED[key])
    reason = run_case(case, path)
    _count(path, case.kind, reason is None, RAN_ON.get(path, "nowhere (failed before running)"))
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


def test_the_cuda_path_says_where_it_ran():
    """Without a CUDA device the cuda path runs the delegates' CPU fallback, and the summary's
    tally must say so rather than count the case as passing on cuda."""
    from offload.delegates import registry

    (case,) = [c for c in CASES if case_id(c) == "node/test_relu"]
    assert run_case(case, "cuda") is None
    on_device = bool(registry.get("cuda").runtime().is_available())
    assert RAN_ON["cuda"] == ("cuda device" if on_device else "cpu fallback, no cuda device")
