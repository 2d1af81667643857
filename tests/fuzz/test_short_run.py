"""A short fuzz run per harness: a few thousand executions under atheris, fixed seed, small seeds.

Each run starts from the small seed models and the harness's regression corpus; any finding (an
exception other than an OffloadError, an input slower than the harness's time bound) fails it.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.harnesses import HARNESSES
from fuzz.seeds import write

pytest.importorskip("atheris", reason="atheris is not installed")

ROOT = Path(__file__).resolve().parents[2]
RUNS = 2500
TIME_BOUND_S = 3  # libFuzzer's -timeout for one input here (1 s in the long runs)


def _rss_limit_mb() -> int:
    """The long runs' 2 GiB on top of this process's peak: a forked child inherits the parent's
    peak resident size (libFuzzer reads it through getrusage), so inside a full test session the
    child starts near the peak pytest reached."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + 2048


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_short_fuzz_run(name, tmp_path):
    corpus = tmp_path / "corpus"
    assert write(HARNESSES[name].seeds(True), corpus) > 0
    regressions = ROOT / "fuzz" / "corpus" / name / "regressions"
    folders = [str(corpus)] + ([str(regressions)] if regressions.is_dir() else [])
    cmd = [
        sys.executable,
        "-m",
        "fuzz",
        name,
        f"-atheris_runs={RUNS}",
        "-seed=1",
        f"-timeout={TIME_BOUND_S}",
        f"-rss_limit_mb={_rss_limit_mb()}",
        f"-artifact_prefix={tmp_path}/",
        *folders,
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    log = done.stdout + done.stderr
    assert "ERROR: libFuzzer" not in log and "Uncaught Python exception" not in log, log[-4000:]
    assert f"Done {RUNS} " in log, log[-4000:]
    # libFuzzer's per-input alarm can still fire while a loaded machine tears the process down
    # after "Done": that SIGALRM is not a finding.
    assert done.returncode in (0, -signal.SIGALRM), log[-4000:]
