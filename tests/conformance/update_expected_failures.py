"""Rewrites expected_failures.txt from a full run: `python -m tests.conformance.update_expected_failures`.

Use it after fixing kernels, then read the diff: the list may only shrink. A case that still
fails keeps the reason written for it before; a new one gets the error it raised, which
tests/conformance/test_expected_failures.py refuses (no category, over the ceiling).
"""

from .cases import light_cases, model_cases, node_cases
from .runner import EXPECTED_FAILURES, case_id, load_expected_failures, run_case


def _header() -> list[str]:
    """The comment lines the list begins with, kept as they are."""
    with open(EXPECTED_FAILURES) as f:
        return [line for line in f if line.startswith("#")]


def main() -> None:
    cases = node_cases() + model_cases() + light_cases()
    before = load_expected_failures()
    # Entries for one path ("opencl:node/…") are kept as they are: this run takes the evaluate path.
    lines, passed = [f"{k}  # {r}" for k, r in before.items() if ":" in k.split("/")[0]], 0
    for c in cases:
        reason = run_case(c)
        if reason is None:
            passed += 1
        else:
            lines.append(f"{case_id(c)}  # {before.get(case_id(c), reason[:160])}")
    with open(EXPECTED_FAILURES, "w") as f:
        f.write("".join(_header()) + "\n".join(lines) + "\n")
    print(f"{passed}/{len(cases)} pass; {len(lines)} listed")


if __name__ == "__main__":
    main()
