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


def tflite_seeds(small: bool = False) -> list[bytes]:
    """The TFLite test models (tests/frontends/tflite/, LiteRT-converted) under the size limit."""
    limit = SMALL_SEED_BYTES if small else MAX_SEED_BYTES
    paths = sorted((ROOT / "tests" / "frontends" / "tflite").glob("*.tflite"))
    return [p.read_bytes() for p in paths if p.stat().st_size <= limit]


def nnpackage_seeds(small: bool = False) -> list[bytes]:
    """The TFLite seeds zipped as nnpackages, with each MANIFEST form offload reads."""
    import io
    import json
    import zipfile

    manifests = [
        {"main-model": "model.tflite"},
        {"major-version": "1", "minor-version": "2", "patch-version": "0", "configs": [],
         "models": ["model.tflite"], "model-types": ["tflite"]},
    ]  # fmt: skip
    out = []
    for k, model in enumerate(tflite_seeds(small)):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("metadata/MANIFEST", json.dumps(manifests[k % 2]))
            z.writestr("model.tflite", model)
        out.append(buf.getvalue())
    return out


def coreml_seeds(small: bool = False) -> list[bytes]:
    """The Core ML test packages (tests/frontends/coreml/ops, special), packed by pack_coreml."""
    from .contract import pack_coreml

    limit = SMALL_SEED_BYTES if small else MAX_SEED_BYTES
    folder = ROOT / "tests" / "frontends" / "coreml"
    out = []
    for package in sorted(folder.glob("*/*.mlpackage")):
        data = package / "Data" / "com.apple.CoreML"
        weights = data / "weights" / "weight.bin"
        packed = pack_coreml(
            (package / "Manifest.json").read_bytes(),
            (data / "model.mlmodel").read_bytes(),
            weights.read_bytes() if weights.is_file() else b"",
        )
        if len(packed) <= limit:
            out.append(packed)
    return out[:: max(1, len(out) // 12)] if small else out  # the short runs: about a dozen


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
