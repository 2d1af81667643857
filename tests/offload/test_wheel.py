"""The built wheel holds every package and data file of the checkout, under ``offload.*``."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVELOPER_ONLY = ("tests/", "fuzz/", "benchmarks/", "examples/", "docs/", ".ci/")


def _tracked() -> list[str]:
    """The checkout's files, as git knows them (the reference: not the build config's own walk)."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def _installed_name(path: str) -> str:
    """Where a file of a top-level stage folder lands in the wheel (``offload/`` stays itself)."""
    return path if path.startswith("offload/") else f"offload/{path}"


def test_the_wheel_holds_every_package_and_data_file(tmp_path):
    files = _tracked()
    source = tmp_path / "src"
    for f in files:  # a copy of the tracked tree: the build sees no stray files of this checkout
        if f.startswith(DEVELOPER_ONLY):
            continue
        (source / f).parent.mkdir(parents=True, exist_ok=True)
        (source / f).write_bytes((ROOT / f).read_bytes())
    out = tmp_path / "wheel"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    build = subprocess.run([*pip, "-w", str(out), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = out.glob("offload-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())

    stages = {f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith("/__init__.py")}
    stages -= {d.rstrip("/") for d in DEVELOPER_ONLY}
    assert {"offload", "ir", "frontends", "passes", "runtime", "delegates", "kernels_cl"} <= stages
    shipped = [f for f in files if f.split("/")[0] in stages and "/" in f and not f.endswith((".pyc", ".sh"))]
    missing = sorted(_installed_name(f) for f in shipped if _installed_name(f) not in names)
    assert not missing, f"{len(missing)} files of the checkout are not in the wheel: {missing[:20]}"
    # each package's folder arrives as a package (its __init__.py), e.g. the preprocess passes
    assert "offload/passes/preprocess/__init__.py" in names
    assert "offload/kernels_cl/common.h" in names and "offload/schemas/coreml/LICENSE.txt" in names
    assert not any(n.startswith(("offload/tests/", "offload/fuzz/", "tests/")) for n in names)


def test_the_version_is_written_once():
    import tomllib

    import offload

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert offload.__version__ == declared
    assert declared not in (ROOT / "offload" / "__init__.py").read_text()
