"""A few real models of the corpus (benchmarks/corpus) on offload's CPU executor against their
reference runtime, when the corpus cache has been fetched; skipped where it has not (CI does not
download it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
# one of each kind the corpus holds: an ONNX OCR recognizer with symbolic batch and width, a
# stateful ONNX voice-activity model with If branches, a float TFLite MediaPipe detector with fp16
# weights, a TFLite audio feature model with a symbolic length, a tiny TFLite regressor
MODELS = [
    "rapidocr-v4-rec",
    "silero-vad",
    "mediapipe-palm-detection-lite",
    "pyopen-wakeword-melspec-tflite",
    "tflite-micro-sine",
]


def _corpus_module(name: str):
    sys.path.insert(0, str(CORPUS))
    try:
        spec = importlib.util.spec_from_file_location(f"corpus_{name}", CORPUS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(CORPUS))


@pytest.mark.corpus
@pytest.mark.parametrize("model_id", MODELS)
def test_corpus_model_matches_its_reference_on_the_cpu(model_id):
    fetch = _corpus_module("fetch")
    entry = next(e for e in fetch.read_manifest() if e.id == model_id)
    if not fetch.is_cached(entry):
        pytest.skip("corpus not fetched: python benchmarks/corpus/fetch.py")
    run = _corpus_module("run")
    if entry.format == "tflite":
        pytest.importorskip("ai_edge_litert", reason="LiteRT (ai-edge-litert) is not installed")
    import numpy as np

    import offload
    import offload.runtime

    program = offload.load(str(fetch.model_path(entry)))
    ports = [(v.name, tuple(v.type.shape), np.dtype(v.type.dtype.numpy)) for v in program.main.inputs]
    reference = run.reference_for(entry, fetch.cache_dir())
    module = offload.runtime.load(offload.save(program))
    for seed, shapes in enumerate(entry.shapes or [{}]):
        feeds = run.feeds_for(entry, ports, shapes, seed)
        reference.reset()
        module.reset_state()
        assert run.compare(module.run(feeds), reference.run(feeds)) is None
