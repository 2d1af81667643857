"""``python -m fuzz.replay HARNESS FILE...``: run inputs through a harness's contract, uninstrumented.

Prints, per file, its time and the OffloadError that stopped it ("ran" when none did), or the
traceback of a finding; exits 1 when any file is a finding or took longer than ``TIME_BOUND``.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from fuzz.harnesses import HARNESSES

TIME_BOUND = 1.0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in HARNESSES:
        sys.exit(f"usage: python -m fuzz.replay {{{','.join(HARNESSES)}}} FILE...")
    check, failed = HARNESSES[argv[1]].check, 0
    for name in argv[2:]:
        path = Path(name)
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for f in files:
            start = time.perf_counter()
            try:
                error = check(f.read_bytes())
            except Exception:
                failed += 1
                print(f"{f}: FINDING\n{traceback.format_exc()}")
                continue
            took = time.perf_counter() - start
            slow = took > TIME_BOUND
            failed += slow
            outcome = "ran" if error is None else f"{type(error).__name__}: {error}"
            print(f"{f}: {took:.3f} s{' SLOW' if slow else ''}: {outcome[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
