"""nnpackage import: a zip (``.nnpkg``) or a folder whose ``metadata/MANIFEST`` names the model.

The MANIFEST is JSON in one of two forms: the first specification's ``{"main-model": "m.tflite"}``
or today's ``{"major-version", "minor-version", "patch-version", "models": [...],
"model-types": [...], "configs": [...], "pkg-inputs": [...], "pkg-outputs": [...]}``. A package
holding one model imports that model; several models become one function chained as
``pkg-inputs`` / ``pkg-outputs`` / ``model-connect`` say, or without those one method each
(``nnpackage_chain``). Model files are TFLite (``TFL3``) or circle
(``CIR0``: TFLite's schema with a few additions, read with the TFLite reader; an operator only
circle has is refused by name).

Nothing in a package is trusted: an entry name must be relative and stay inside the package
(no ``..``, no absolute or drive path, no symlink out of a folder); every entry's size, the
total and the compression ratio are bounded before and while reading, so no zip bomb is
inflated; a bad archive, a missing or malformed MANIFEST ends in ``ModelFormatError``.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import posixpath
import struct
import zipfile
import zlib

from offload.errors import ModelFormatError, OffloadError, UnsupportedOpError
from offload.ir import Program
from offload.ir.budget import PACKAGE as PACKAGE_BUDGET

MANIFEST = "metadata/MANIFEST"
MAX_ENTRIES = 4096
MAX_DIRECTORY_BYTES = MAX_ENTRIES * 1024  # a zip's central directory: entries with long names
MAX_MANIFEST_BYTES = 1 << 20
MAX_ENTRY_BYTES = 1 << 32  # one model file
# Everything read from one package, zip or folder: the machine's package budget (ir/budget.py;
# environment OFFLOAD_MAX_PACKAGE_BYTES).
MAX_TOTAL_BYTES = PACKAGE_BUDGET.value
MAX_RATIO = 100  # uncompressed / compressed, for entries over RATIO_FLOOR bytes
RATIO_FLOOR = 1 << 20
MODEL_TYPES = {"tflite": b"TFL3", "circle": b"CIR0"}
MAX_MODELS = 64


def _entry_name(name: str, origin: str) -> str:
    """``name`` as a normalised relative path inside the package, or a ModelFormatError."""
    if (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or (len(name) > 1 and name[1] == ":")
    ):
        raise ModelFormatError(f"{origin}: entry name {name!r} is not a relative path inside the package")
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../") or norm.startswith("/"):
        raise ModelFormatError(f"{origin}: entry name {name!r} leaves the package")
    return norm


class _Zip:
    """The entries of a zip package, each read at most once, bounded."""

    def __init__(self, data: bytes, origin: str):
        self.origin = origin
        self.read_total = 0
        _check_directory(data, origin)
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zip.infolist()
        except (
            zipfile.BadZipFile,
            zipfile.LargeZipFile,
            NotImplementedError,
            ValueError,
            EOFError,
            OSError,
        ) as e:
            # NotImplementedError: a zip version or feature Python's zipfile does not read
            raise ModelFormatError(f"{origin}: not a readable zip archive: {e}") from None
        if len(infos) > MAX_ENTRIES:
            raise ModelFormatError(f"{origin}: {len(infos)} entries, more than {MAX_ENTRIES}")
        self.entries: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = _entry_name(info.filename, origin)
            if name in self.entries:
                raise ModelFormatError(f"{origin}: entry {name!r} appears twice")
            self.entries[name] = info

    def read(self, name: str, limit: int) -> bytes:
        info = self.entries.get(_entry_name(name, self.origin))
        where = f"{self.origin}: entry {name!r}"
        if info is None or info.is_dir():
            raise ModelFormatError(f"{where} is not in the package")
        if info.flag_bits & 0x1:
            raise ModelFormatError(f"{where} is encrypted")
        size = info.file_size
        _check_budget(where, size, limit, self.read_total)
        if size > RATIO_FLOOR and size > MAX_RATIO * max(info.compress_size, 1):
            raise ModelFormatError(
                f"{where}: compressed {MAX_RATIO}:1 or more ({info.compress_size} → {size} bytes); refused"
            )
        try:
            with self.zip.open(info) as f:
                data = f.read(size + 1)  # the header's size is checked, not trusted
        except (
            zipfile.BadZipFile,
            zlib.error,
            lzma.LZMAError,  # an entry's method says LZMA, its bytes are not
            NotImplementedError,
            EOFError,
            OSError,  # bz2 reports bad data as OSError
            ValueError,
        ) as e:
            raise ModelFormatError(
                f"{where}: cannot be read as zip compression method {info.compress_type}: {e}"
            ) from None
        if len(data) != size:
            raise ModelFormatError(f"{where}: holds {len(data)} bytes, its header says {size}")
        self.read_total += size
        return data


def _check_budget(where: str, size: int, limit: int, read_before: int) -> None:
    """Refuse an entry of ``size`` bytes past its own ``limit`` or past the package budget with
    what the package read before it, before any of it is read."""
    if size > limit:
        raise ModelFormatError(f"{where}: {size} bytes is over the limit of {limit} bytes for one file")
    if read_before + size > MAX_TOTAL_BYTES:
        raise ModelFormatError(
            f"{where}: {size} bytes is over the limit: with the {read_before} bytes read before it, the "
            f"package passes its {MAX_TOTAL_BYTES}-byte budget ({PACKAGE_BUDGET.explain(MAX_TOTAL_BYTES)})"
        )


def _check_directory(data: bytes, origin: str) -> None:
    """Refuse a zip whose end record declares more entries or a larger central directory than a
    package has, before ``zipfile`` reads the directory (it builds an object per entry)."""
    try:
        end = zipfile._EndRecData(io.BytesIO(data))  # the end record, zip64 included
    except (OSError, ValueError, struct.error):
        end = None
    if not end:
        return  # not a zip: ZipFile says so
    entries, size = end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]
    if entries > MAX_ENTRIES or size > MAX_DIRECTORY_BYTES:
        raise ModelFormatError(
            f"{origin}: the zip declares {entries} entries in a {size}-byte central directory; "
            f"a package has at most {MAX_ENTRIES} entries in {MAX_DIRECTORY_BYTES} bytes"
        )


class _Folder:
    """The files of a package folder, confined to it."""

    def __init__(self, root: str):
        self.origin = root
        self.root = os.path.realpath(root)
        self.read_total = 0

    def read(self, name: str, limit: int) -> bytes:
        path = os.path.realpath(os.path.join(self.root, _entry_name(name, self.origin)))
        if os.path.commonpath([path, self.root]) != self.root:
            raise ModelFormatError(f"{self.origin}: {name!r} leads outside the package folder")
        if not os.path.isfile(path):
            raise ModelFormatError(f"{self.origin}: {name!r} is not in the package")
        size = os.path.getsize(path)
        _check_budget(f"{self.origin}: {name!r}", size, limit, self.read_total)
        with open(path, "rb") as f:
            data = f.read(size + 1)  # the size it has now, not the limit: no buffer of the limit
        if len(data) != size:
            raise ModelFormatError(f"{self.origin}: {name!r} changed size while it was read")
        self.read_total += size
        return data


def _manifest(files) -> tuple[list[tuple[str, str]], dict]:
    """The models' entry names and types, from the MANIFEST in either form, and the MANIFEST."""
    where = f"{files.origin}: {MANIFEST}"
    try:
        manifest = json.loads(files.read(MANIFEST, MAX_MANIFEST_BYTES).decode("utf-8"))
    # ValueError: also an integer past Python's digit limit; RecursionError: a deep nesting
    except (ValueError, RecursionError) as e:
        raise ModelFormatError(f"{where} is not JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise ModelFormatError(f"{where} is not a JSON object")
    if "models" in manifest:
        models, types = manifest["models"], manifest.get("model-types")
        if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
            raise ModelFormatError(f"{where}: 'models' is not a non-empty list of file names")
        if types is not None and (not isinstance(types, list) or len(types) != len(models)):
            raise ModelFormatError(f"{where}: 'model-types' does not list one type per model")
        if len(models) > MAX_MODELS:
            raise ModelFormatError(f"{where}: {len(models)} models, more than {MAX_MODELS}")
        kinds = types if types else [posixpath.splitext(m)[1].lstrip(".") for m in models]
        found = list(zip(models, kinds))
    elif "main-model" in manifest:
        model = manifest["main-model"]
        if not isinstance(model, str):
            raise ModelFormatError(f"{where}: 'main-model' is not a file name")
        found = [(model, posixpath.splitext(model)[1].lstrip("."))]
    else:
        raise ModelFormatError(f"{where} names no model ('models' or 'main-model')")
    for _, kind in found:
        if not isinstance(kind, str):
            raise ModelFormatError(f"{where}: model type {kind!r} is not a string")
    seen = set()
    for model, _ in found:  # each would be read and imported again: a way to multiply a package
        key = posixpath.normpath(model)
        if key in seen:
            raise ModelFormatError(f"{where}: model {model!r} is listed twice; list each model file once")
        seen.add(key)
    return found, manifest


def _model(files, model: str, kind: str) -> Program:
    data = files.read(model, MAX_ENTRY_BYTES)
    origin = f"{files.origin}/{model}"
    identifier = data[4:8] if len(data) >= 8 else b""
    found = {v: k for k, v in MODEL_TYPES.items()}.get(identifier)
    if found is None:
        raise UnsupportedOpError(
            f"{origin}: a {kind!r} model file offload cannot read (TFLite and circle flatbuffers only)"
        )
    if kind in MODEL_TYPES and kind != found:
        raise ModelFormatError(f"{origin}: the MANIFEST says {kind}, the file is {found}")
    if found == "circle":  # the TFLite layout under another identifier
        data = data[:4] + MODEL_TYPES["tflite"] + data[8:]
    from .tflite import import_tflite

    program = import_tflite(data, origin)
    program.metadata["format"] = f"nnpackage/{found}"
    return program


def _import(files) -> Program:
    found, manifest = _manifest(files)
    programs = [_model(files, model, kind) for model, kind in found]
    if len(programs) == 1:
        return programs[0]
    from offload.ir import verify

    from .nnpackage_chain import joined, separate

    if "pkg-inputs" in manifest or "pkg-outputs" in manifest:
        program = joined(programs, manifest, files.origin)
    else:
        program = separate(programs, files.origin)
    formats = sorted({p.metadata["format"] for p in programs})
    program.metadata["format"] = "+".join(formats)
    try:
        verify(program)
    except OffloadError as e:
        raise ModelFormatError(f"{files.origin}: the joined models do not verify: {e}") from None
    return program


def is_package_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, *MANIFEST.split("/")))


def import_nnpackage_zip(data: bytes, origin: str) -> Program:
    """Import the model of a zipped nnpackage (``.nnpkg``)."""
    return _import(_Zip(data, origin))


def import_nnpackage_folder(path: str) -> Program:
    """Import the model of an nnpackage folder (one holding metadata/MANIFEST)."""
    return _import(_Folder(path))
