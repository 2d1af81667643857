"""Core ML files: an ``.mlpackage`` folder or an ``.mlmodel`` file → its Model message and weights.

An ``.mlpackage`` is a folder with ``Manifest.json``, whose ``rootModelIdentifier`` names one of its
``itemInfoEntries``; that entry's ``path`` (under ``Data/``) is the model's protobuf
(``Model.proto``). An ML program's large constants are not in the protobuf: a ``const`` refers to
``BlobFileValue(fileName="@model_path/weights/weight.bin", offset)``, where ``@model_path`` is the
folder holding the model file.

A weight file (MIL blob storage, version 2) is a 64-byte header (``uint32 count``, ``uint32
version``, reserved) followed by blobs, each a 64-byte record (``uint32 sentinel 0xDEADBEEF``,
``uint32 dtype``, ``uint64 size``, ``uint64 data offset``, ``uint64 padding bits``, reserved) and
its data, 64-byte aligned. A const's offset points at the record. Sub-byte types (int4, uint1–6)
are packed low bits first; ``padding bits`` says how many bits of the last byte are unused (for
sub-byte types only: files of whole-byte types may hold anything there).

Nothing here is trusted: manifest and model sizes are bounded before reading, every path stays
inside the package (no ``..``, no absolute path, no symlink out), every record is checked
(sentinel, type, size and offset inside the file) before its bytes are read, and each blob is
read into memory (``WeightFile`` says why it is not mapped).
"""

from __future__ import annotations

import json
import os
import struct
import weakref
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from offload.errors import ModelFormatError

MAX_MANIFEST_BYTES = 1 << 20
MAX_SPEC_BYTES = 1 << 31  # the protobuf itself (weights live in weight files)
MAX_WEIGHT_FILES = 64
MODEL_PATH = "@model_path/"
SENTINEL = 0xDEADBEEF
HEADER = struct.Struct("<II")  # count, version (then 56 reserved bytes)
RECORD = struct.Struct("<IIQQQ")  # sentinel, dtype, size, offset, padding bits (then 32 reserved)
RECORD_BYTES = 64

# BlobDataType (MILBlob/Blob/BlobDataType.hpp) → (numpy type of the unpacked values, bits per value).
BLOB_TYPES: dict[int, tuple[np.dtype, int]] = {
    1: (np.dtype("<f2"), 16),
    2: (np.dtype("<f4"), 32),
    3: (np.dtype("u1"), 8),
    4: (np.dtype("i1"), 8),
    6: (np.dtype("<i2"), 16),
    7: (np.dtype("<u2"), 16),
    8: (np.dtype("i1"), 4),  # int4
    9: (np.dtype("u1"), 1),
    10: (np.dtype("u1"), 2),
    11: (np.dtype("u1"), 4),
    12: (np.dtype("u1"), 3),
    13: (np.dtype("u1"), 6),
    14: (np.dtype("<i4"), 32),
    15: (np.dtype("<u4"), 32),
}
# MIL DataType (MIL.proto) → the BlobDataType its blobs are stored as.
BLOB_CODES = {
    10: 1,
    11: 2,
    31: 3,
    21: 4,
    13: 5,
    22: 6,
    32: 7,
    25: 8,
    37: 9,
    36: 10,
    35: 11,
    39: 12,
    38: 13,
    23: 14,
    33: 15,
}
BLOB_TYPE_NAMES = {
    1: "float16", 2: "float32", 3: "uint8", 4: "int8", 5: "bfloat16", 6: "int16", 7: "uint16",
    8: "int4", 9: "uint1", 10: "uint2", 11: "uint4", 12: "uint3", 13: "uint6", 14: "int32",
    15: "uint32", 16: "float8e4m3fn", 17: "float8e5m2",
}  # fmt: skip


def unpack_bits(data: np.ndarray, bits: int, count: int, signed: bool) -> np.ndarray:
    """``count`` values of ``bits`` bits each, packed low bits first in the bytes ``data``."""
    flat = np.unpackbits(data, bitorder="little")[: count * bits].reshape(count, bits)
    values = (flat.astype(np.uint16) << np.arange(bits, dtype=np.uint16)).sum(axis=1)
    if signed:
        values = np.where(values >= 1 << (bits - 1), values.astype(np.int16) - (1 << bits), values)
        return values.astype(np.int8)
    return values.astype(np.uint8)


class WeightFile:
    """One MIL blob storage file; ``blob(offset)`` checks one blob and reads its values.

    Blobs are read into memory, not viewed in a mapping of the file: a program imported from a
    package keeps its weights when the package is rewritten in place afterwards (a mapping
    would see the new bytes, or end the process with SIGBUS when the file shrinks). The file
    stays open while the import reads it, so a package replaced meanwhile is read whole from
    the old file; one truncated in place meanwhile is a ModelFormatError.
    """

    def __init__(self, path: str, origin: str):
        self.path, self.origin = path, origin
        try:
            # unbuffered: every read asks the file, so a change after opening is seen, not cached
            self._file = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the finalizer)
        except OSError as e:
            raise ModelFormatError(f"{origin}: cannot read weight file {path}: {e.strerror}") from None
        weakref.finalize(self, self._file.close)
        self.size = os.fstat(self._file.fileno()).st_size
        if self.size < RECORD_BYTES:
            raise self.fail(f"is {self.size} bytes, shorter than its 64-byte header")
        self.count, self.version = HEADER.unpack_from(self._read(0, RECORD_BYTES, "its header"))
        if self.version != 2:
            raise self.fail(f"has storage version {self.version}; only version 2 is read")

    def _read(self, at: int, n: int, what: str) -> memoryview:
        """``n`` bytes at ``at``, read-only; a ModelFormatError when the file ends before them."""
        data = bytearray(n)
        view, got = memoryview(data), 0
        self._file.seek(at)
        while got < n:
            k = self._file.readinto(view[got:])
            if not k:
                raise self.fail(
                    f"changed while it was read: {what} ({n} bytes at {at}) ends after {got} "
                    f"bytes; the file was {self.size} bytes when opened. Import the package again"
                )
            got += k
        return view.toreadonly()

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.origin}: weight file {os.path.basename(self.path)} {what}")

    def blob(self, offset: int, code: int, count: int, where: str) -> np.ndarray:
        """The ``count`` values of the blob whose record is at ``offset``, which must hold type
        ``code`` (a BlobDataType); sub-byte values come unpacked, one per byte."""
        if offset % RECORD_BYTES or not RECORD_BYTES <= offset <= self.size - RECORD_BYTES:
            raise self.fail(f"has no blob record at offset {offset} ({where}; the file is {self.size} bytes)")
        record = self._read(offset, RECORD_BYTES, f"the blob record at {offset} ({where})")
        sentinel, stored_code, size, at, padding = RECORD.unpack_from(record)
        if sentinel != SENTINEL:
            raise self.fail(f"has no blob record at offset {offset} ({where}): sentinel {sentinel:#x}")
        if stored_code != code:
            stored = BLOB_TYPE_NAMES.get(stored_code, f"code {stored_code}")
            raise self.fail(
                f"blob at {offset} ({where}) holds {stored}, its const declares {BLOB_TYPE_NAMES[code]}"
            )
        if at < offset + RECORD_BYTES or at > self.size or size > self.size - at:
            raise self.fail(
                f"blob at {offset} ({where}): {size} bytes at offset {at} run past the end ({self.size} bytes)"
            )
        dtype, bits = BLOB_TYPES[code]
        if bits >= 8:
            # Before sub-byte types the field was reserved, and older coremltools left other
            # bytes in it: it means nothing for a whole-byte type, which Core ML reads so too.
            padding = 0
        elif padding >= 8:
            raise self.fail(f"blob at {offset} ({where}) declares {padding} padding bits")
        have = (size * 8 - padding) // bits
        if have != count:
            raise self.fail(f"blob at {offset} ({where}) holds {have} values, its const declares {count}")
        data = self._read(at, size, f"the blob at {offset} ({where})")
        if bits < 8:
            return unpack_bits(np.frombuffer(data, np.uint8), bits, count, signed=code == 8)
        return np.frombuffer(data, dtype, count)  # read-only, as constants are


@dataclass
class CoreMLModel:
    """A Core ML model as read from disk: its Model message and where its weight files are."""

    spec: object  # Model_pb2.Model
    origin: str
    model_dir: str | None  # the folder @model_path names; None for bytes
    weight_files: dict[str, WeightFile] = field(default_factory=dict)

    def weight_file(self, name: str, where: str) -> WeightFile:
        """The weight file a BlobFileValue names, which must lie inside the model's folder."""
        if name in self.weight_files:
            return self.weight_files[name]
        if self.model_dir is None:
            raise ModelFormatError(
                f"{self.origin}: {where} reads weight file {name!r}, but the model was given as bytes"
            )
        if not name.startswith(MODEL_PATH):
            raise ModelFormatError(f"{self.origin}: {where}: weight file {name!r} is not under {MODEL_PATH}")
        path = inside(self.model_dir, name[len(MODEL_PATH) :], self.origin, where)
        if len(self.weight_files) >= MAX_WEIGHT_FILES:
            raise ModelFormatError(f"{self.origin}: more than {MAX_WEIGHT_FILES} weight files")
        self.weight_files[name] = WeightFile(path, self.origin)
        return self.weight_files[name]


def inside(root: str, rel: str, origin: str, where: str) -> str:
    """``root/rel`` after checking that it names an existing file inside ``root``."""
    if not rel or "\x00" in rel or "\\" in rel or os.path.isabs(rel) or rel.startswith("/"):
        raise ModelFormatError(f"{origin}: {where}: path {rel!r} is not a relative path inside the package")
    real_root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(real_root, rel))
    if os.path.commonpath([real_root, path]) != real_root:
        raise ModelFormatError(f"{origin}: {where}: path {rel!r} leaves the package")
    if not os.path.isfile(path):
        raise ModelFormatError(f"{origin}: {where}: {rel!r} is not a file in the package")
    return path


def parse_spec(data: bytes, origin: str):
    from offload.schemas.generated.coreml import Model_pb2

    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as e:
        raise ModelFormatError(f"{origin}: is not a Core ML model (protobuf does not parse: {e})") from None
    return spec


def read_spec_file(path: str, origin: str):
    size = os.path.getsize(path)
    if size > MAX_SPEC_BYTES:
        raise ModelFormatError(
            f"{origin}: model file of {size} bytes is larger than the {MAX_SPEC_BYTES}-byte limit"
        )
    with open(path, "rb") as f:
        return parse_spec(f.read(), origin)


def is_mlpackage(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "Manifest.json"))


def read_mlpackage(path: str) -> CoreMLModel:
    """The root model of an ``.mlpackage`` folder, checked as the module docstring says."""
    origin = path
    manifest_path = os.path.join(path, "Manifest.json")
    if os.path.getsize(manifest_path) > MAX_MANIFEST_BYTES:
        raise ModelFormatError(f"{origin}: Manifest.json is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        with open(manifest_path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    # ValueError: also an integer past Python's digit limit; RecursionError: a deep nesting
    except (ValueError, RecursionError) as e:
        raise ModelFormatError(f"{origin}: Manifest.json is not JSON: {e}") from None
    entries = manifest.get("itemInfoEntries") if isinstance(manifest, dict) else None
    root = manifest.get("rootModelIdentifier") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict) or not isinstance(root, str):
        raise ModelFormatError(f"{origin}: Manifest.json has no itemInfoEntries / rootModelIdentifier")
    entry = entries.get(root)
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        raise ModelFormatError(f"{origin}: Manifest.json: root model {root!r} has no entry with a path")
    data_dir = os.path.join(path, "Data")
    model_path = inside(data_dir, entry["path"], origin, "Manifest.json root model")
    spec = read_spec_file(model_path, origin)
    return CoreMLModel(spec, origin, os.path.dirname(model_path))


def read_mlmodel(path: str) -> CoreMLModel:
    """An ``.mlmodel`` file; its weight files, if any, are beside it."""
    return CoreMLModel(read_spec_file(path, path), path, os.path.dirname(os.path.abspath(path)))
