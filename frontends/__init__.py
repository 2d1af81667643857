"""Frontends: read a model file (ONNX, TFLite / nnpackage, Core ML) into an ir.Program."""

from __future__ import annotations

import os

from offload.errors import ModelFormatError
from offload.ir import Program

# Files larger than this are refused before being read.
MAX_MODEL_BYTES = 1 << 34


def sniff(data: bytes) -> str:
    """The format of a model's bytes, judged by content: 'pte', 'tflite', 'zip' or 'onnx'."""
    if len(data) >= 8 and data[4:8] == b"ET12":
        return "pte"
    if len(data) >= 8 and data[4:8] == b"TFL3":
        return "tflite"
    if data[:4] == b"PK\x03\x04":
        return "zip"
    return "onnx"


def load(model: str | os.PathLike | bytes) -> Program:
    """Import a model from a path or from its bytes, choosing the frontend by content."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data, origin, base_dir = bytes(model), "<bytes>", None
    else:
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelFormatError(f"{path}: no such file")
        if os.path.isdir(path):
            from .coreml_reader import is_mlpackage
            from .nnpackage import import_nnpackage_folder, is_package_folder

            if is_package_folder(path):
                return import_nnpackage_folder(path)
            if is_mlpackage(path):
                from .coreml import import_coreml

                return import_coreml(path)
            raise ModelFormatError(
                f"{path}: is a folder with neither metadata/MANIFEST (an nnpackage) "
                "nor Manifest.json (an .mlpackage)"
            )
        if path.lower().endswith(".mlmodel"):  # protobuf, like ONNX: told apart by its name
            from .coreml import import_coreml

            return import_coreml(path)
        size = os.path.getsize(path)
        if size > MAX_MODEL_BYTES:
            raise ModelFormatError(f"{path}: {size} bytes is larger than the {MAX_MODEL_BYTES}-byte limit")
        with open(path, "rb") as f:
            data = f.read()
        origin, base_dir = path, os.path.dirname(os.path.abspath(path))
    if not data:
        raise ModelFormatError(f"{origin}: file is empty")
    kind = sniff(data)
    if kind == "tflite":
        from .tflite import import_tflite

        return import_tflite(data, origin)
    if kind == "zip":
        from .nnpackage import import_nnpackage_zip

        return import_nnpackage_zip(data, origin)
    if kind != "onnx":
        raise ModelFormatError(
            f"{origin}: looks like a {kind} file; this version of offload imports ONNX models"
        )
    from .onnx import import_onnx

    return import_onnx(data, origin, base_dir)
