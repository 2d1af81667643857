"""``python -m fuzz HARNESS [--small] [libFuzzer flags] [corpus folders]``: run one harness.

Without corpus folders it fuzzes ``fuzz/corpus/HARNESS/work`` (seeded on first use, not kept in
git) and reads ``fuzz/corpus/HARNESS/regressions`` too; crashers are written to
``fuzz/corpus/HARNESS/crashes/``. Defaults: ``-timeout=1`` (a slower input is a finding),
``-rss_limit_mb=2048``. ``--small`` seeds with the small models only (the test suite's short
run). ``--seed-only DIR`` writes the seeds into DIR and exits.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
DEFAULTS = ["-timeout=1", "-rss_limit_mb=2048"]


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    name, rest = argv[1], argv[2:]
    small, collect = "--small" in rest, "--collect" in rest
    rest = [a for a in rest if a not in ("--small", "--collect")]

    with atheris.instrument_imports(include=["offload"]):
        from fuzz.harnesses import HARNESSES
    if name not in HARNESSES:
        sys.exit(f"unknown harness {name!r}; the harnesses are {sorted(HARNESSES)}")
    harness = HARNESSES[name]
    if "--seed-only" in rest:
        from fuzz.seeds import write

        folder = rest[rest.index("--seed-only") + 1]
        print(f"{write(harness.seeds(small), folder)} seeds written to {folder}")
        return

    folders = [a for a in rest if not a.startswith("-")]
    flags = [a for a in rest if a.startswith("-")]
    if not folders:
        from fuzz.seeds import write

        base = HERE / "corpus" / name
        work = base / "work"
        if not work.is_dir() or not any(work.iterdir()):
            write(harness.seeds(small), work)
        (base / "crashes").mkdir(exist_ok=True)
        folders = [str(work)]
        if (base / "regressions").is_dir():
            folders.append(str(base / "regressions"))
        flags.append(f"-artifact_prefix={base / 'crashes'}/")
    for d in DEFAULTS:
        if not any(f.startswith(d.split("=")[0] + "=") for f in flags):
            flags.append(d)

    def test_one_input(data: bytes) -> None:
        harness.check(data)

    if collect:
        test_one_input = _collecting(harness.check, HERE / "corpus" / name / "crashes")

    kwargs = {}
    if harness.mutator is not None:
        mutator = harness.mutator

        def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
            return mutator(data, max_size, seed, atheris.Mutate)

        kwargs["custom_mutator"] = custom_mutator
    _warm_up(harness.check, Path(folders[0]))
    atheris.Setup([argv[0], *flags, *folders], test_one_input, **kwargs)
    atheris.Fuzz()


WARM_UP_INPUTS = 4


def _warm_up(check, folder: Path) -> None:
    """Run ``check`` on the first few inputs of ``folder`` before libFuzzer starts timing: what a
    process does once (numba loading its compiled loops from the disk cache, kernel modules
    imported on first use) then does not count against the first input's ``-timeout`` (on a
    loaded machine it took over 3 s). Findings are libFuzzer's to report, when it runs the
    same inputs again."""
    files = sorted(f for f in folder.iterdir() if f.is_file())[:WARM_UP_INPUTS] if folder.is_dir() else []
    for f in files:
        with contextlib.suppress(Exception):  # libFuzzer meets it again and reports it
            check(f.read_bytes())


def _collecting(check, folder: Path):
    """``check`` that records each distinct finding instead of stopping the run."""
    import traceback

    seen: dict[str, int] = {}

    def test_one_input(data: bytes) -> None:
        try:
            check(data)
        except Exception as e:
            frame = traceback.extract_tb(e.__traceback__)[-1]
            signature = f"{type(e).__name__}-{Path(frame.filename).stem}-{frame.lineno}"
            seen[signature] = seen.get(signature, 0) + 1
            if seen[signature] == 1:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"finding-{signature}").write_bytes(data)
                print(f"FINDING {signature}: {type(e).__name__}: {str(e)[:200]}", flush=True)

    return test_one_input


if __name__ == "__main__":
    main(sys.argv)
