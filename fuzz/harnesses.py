"""The harness table: per loader, the contract one input must keep, its mutator and its seeds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import seeds
from .contract import check_coreml, check_onnx, check_pte
from .mutate_onnx import mutate


@dataclass(frozen=True)
class Harness:
    """``check`` raises on a finding; ``mutator`` (data, max_size, seed, fallback) → bytes is
    atheris' custom mutator (None: libFuzzer's byte mutations); ``seeds(small)`` builds the seeds."""

    check: Callable[[bytes], None]
    seeds: Callable[[bool], list[bytes]]
    mutator: Callable | None = None
    doc: str = ""


HARNESSES = {
    "onnx": Harness(
        check_onnx,
        seeds.onnx_seeds,
        doc="ONNX bytes (byte mutations): offload.load, save, runtime.load, a bounded run",
    ),
    "onnx_proto": Harness(
        check_onnx,
        seeds.onnx_seeds,
        mutate,
        doc="ONNX ModelProto (structure-aware mutations, bytes as fallback): the onnx contract",
    ),
    "pte": Harness(
        check_pte,
        seeds.pte_seeds,
        doc=".pte bytes (byte mutations): offload.runtime.load, a bounded run",
    ),
    "tflite": Harness(
        check_onnx,
        seeds.tflite_seeds,
        doc="TFLite flatbuffer bytes (byte mutations): the onnx contract (offload.load sniffs TFL3)",
    ),
    "nnpackage": Harness(
        check_onnx,
        seeds.nnpackage_seeds,
        doc="nnpackage zip bytes (byte mutations): the onnx contract (offload.load sniffs the zip)",
    ),
    "coreml": Harness(
        check_coreml,
        seeds.coreml_seeds,
        doc="a Core ML package's three files packed in one input (byte mutations): written as an "
        ".mlpackage, then the onnx contract",
    ),
}
