"""The expected-failure list only shrinks and only states what can be checked: the number of
entries is held to a ceiling that is lowered as entries go, each reason names its category, a
reason that says a peer fails the case too is checked here by running that peer on it, and any
other mention of a peer is refused."""

from __future__ import annotations

import numpy as np
import pytest

from .cases import assert_similar
from .runner import load_expected_failures
from .test_onnx_backend import CASES, case_id

EXPECTED = load_expected_failures()
ORT_FAILS = "onnxruntime fails this case too"


def _onnxruntime_fails(case) -> bool:
    from tests.reference import onnxruntime_outputs

    try:
        for inputs, expected in case.data_sets:
            got = list(onnxruntime_outputs(case.model, inputs).values())
            for ref, out in zip(expected, got):
                assert_similar(ref, out, case.rtol, case.atol)
    except Exception:  # a wrong value, or no kernel: it fails
        return True
    return False


# The number of entries now. A new failure does not go on the list: it is fixed. Where an entry
# goes, the ceiling comes down with it, so that no later entry can take its place unseen.
CEILING = 8
# What a reason begins with: the expected data are a random draw no implementation is asked to
# reproduce (the case is not run), or the spec defines what offload does not do yet.
CATEGORIES = ("nondeterministic:", "not implemented:")


def test_the_list_only_shrinks():
    n = len(EXPECTED)
    assert n <= CEILING, (
        f"expected_failures.txt has {n} entries, more than its ceiling of {CEILING}: fix the new "
        "failures instead of listing them"
    )
    assert n == CEILING, f"expected_failures.txt shrank to {n} entries: lower CEILING to {n}"


def test_every_reason_names_its_category():
    bare = sorted(k for k, r in EXPECTED.items() if not r.startswith(CATEGORIES))
    assert not bare, f"reasons that begin with none of {CATEGORIES}: {bare}"


PEER_CLAIMS = sorted(key for key, reason in EXPECTED.items() if ORT_FAILS in reason)


def test_every_peer_claim_is_one_that_is_checked():
    loose = [k for k, r in EXPECTED.items() if "onnxruntime" in r.lower() and ORT_FAILS not in r]
    assert not loose, f"reasons that mention onnxruntime without the checked claim '{ORT_FAILS}': {loose}"


def test_onnxruntime_fails_the_cases_said_to_fail_on_it():
    for key in PEER_CLAIMS:
        name = key.split(":")[-1]
        (case,) = [c for c in CASES if case_id(c) == name]
        assert _onnxruntime_fails(case), f"{key}: onnxruntime passes this case; the reason says it fails"


def test_fp16_ulps_pass_two_ulps_and_not_three():
    """The bound of expanded attention cases (cases.EXPANDED_FP16_ULPS) and no more."""
    ref = np.array([0.46948242, 1.0, 0.25], np.float16)
    two, three = ref + 2 * np.spacing(ref), ref + 3 * np.spacing(ref)
    assert_similar(ref, two, 1e-3, 1e-7, fp16_ulps=2)
    with pytest.raises(AssertionError):
        assert_similar(ref, three, 1e-3, 1e-7, fp16_ulps=2)
    with pytest.raises(AssertionError):
        assert_similar(ref, two, 1e-3, 1e-7)  # the case's own rtol alone does not allow it


def test_the_check_tells_a_pass_from_a_failure():
    """The checker itself: onnxruntime passes test_relu, and fails it once the data are changed."""
    (case,) = [c for c in CASES if case_id(c) == "node/test_relu"]
    assert not _onnxruntime_fails(case)
    ((inputs, outputs),) = case.data_sets
    case.data_sets = [(inputs, [np.asarray(outputs[0]) + 1])]
    try:
        assert _onnxruntime_fails(case)
    finally:
        case.data_sets = [(inputs, outputs)]
