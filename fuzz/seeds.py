"""The seed corpus of each harness: the repository's own models and a few ONNX backend test models.

ONNX seeds: tests/models/*.onnx under ``MAX_SEED_BYTES`` (the large CNNs make every execution
slow and add no operator the small ones lack), the bundled example built by
examples/build_example.py, and the ``model.onnx`` of the onnx package's "simple" and
"pytorch-operator" backend tests when the onnx package is installed. .pte seeds: the ONNX seeds
that offload loads, saved with ``offload.save``. ``small=True`` keeps the seeds (and the models
the .pte seeds come from) under 8 KiB and leaves the example out, for the short runs in the
test suite.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SEED_BYTES = 128 * 1024
SMALL_SEED_BYTES = 8 * 1024
ONNX_TEST_SETS = ("simple", "pytorch-operator")


def onnx_seeds(small: bool = False) -> list[bytes]:
    limit = SMALL_SEED_BYTES if small else MAX_SEED_BYTES
    paths = sorted((ROOT / "tests" / "models").glob("*.onnx"))
    paths += _onnx_backend_models()
    seeds = [p.read_bytes() for p in paths if p.stat().st_size <= limit]
    if not small:
        seeds.append(_example())
    return seeds


def pte_seeds(small: bool = False) -> list[bytes]:
    import offload
    from offload.errors import OffloadError

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for data in onnx_seeds(small):
            try:
                pte = offload.save(offload.load(data))
            except OffloadError:
                continue
            if len(pte) <= (SMALL_SEED_BYTES if small else MAX_SEED_BYTES):
                out.append(pte)
    return out


def _onnx_backend_models() -> list[Path]:
    try:
        import onnx
    except ImportError:
        return []
    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    return sorted(p for s in ONNX_TEST_SETS for p in (data / s).glob("*/model.onnx"))


def _example() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny_cnn.onnx")
        script = str(ROOT / "examples" / "build_example.py")
        subprocess.run([sys.executable, script, path], check=True, capture_output=True)
        return Path(path).read_bytes()


def write(seeds: list[bytes], folder: str | os.PathLike) -> int:
    """Write each seed as a file named by its hash (as libFuzzer names corpus files); the count."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for data in seeds:
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return len(seeds)
