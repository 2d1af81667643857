"""The compiled-model cache of ``InferenceSession``: a model's .pte and its description, kept in a
folder the caller names (``SessionOptions(cache_dir=...)``), by a key that changes when anything
that decides the compiled file does.

The key hashes the model's bytes (every file of a model folder, with its path), the providers
and their options, the passes, offload's version, the size and modification time of each of
offload's source files (a source checkout that changes recompiles), and the installed backends
with their sources (a plugin upgrade recompiles). An entry is ``KEY.pte`` with ``KEY.json``
(inputs, outputs with their symbolic dim names, model metadata: what a .pte does not keep),
each written whole (``offload.files.replace_file``); the JSON, written last, marks the entry
complete. ``clear_cache`` removes the entries.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from pathlib import Path

from offload.errors import OffloadError
from offload.files import replace_file

FORMAT = "offload-session-cache-1"
# The folders of the offload package whose sources decide a compiled file.
STAGES = ("offload", "ir", "frontends", "passes", "partitioner", "emit", "schemas", "delegates", "kernels_cl")
SOURCE_SUFFIXES = (".py", ".cl", ".h", ".fbs", ".proto")


@functools.cache
def _source_stamp() -> str:
    """Size and modification time of every source file of the package, hashed (stat only)."""
    h = hashlib.sha256()
    for stage in STAGES:
        module = importlib.import_module("offload" if stage == "offload" else f"offload.{stage}")
        for folder in getattr(module, "__path__", []):
            for path in sorted(Path(folder).rglob("*")):
                if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
                    st = path.stat()
                    h.update(f"{stage}/{path.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _model_digest(source, h) -> None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        h.update(b"bytes\0")
        h.update(bytes(source))
        return
    path = Path(os.fspath(source))
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h.update(f"{'folder' if path.is_dir() else 'file'}:{path.suffix.lower()}\0".encode())
    for p in files:
        h.update(f"{p.relative_to(path) if path.is_dir() else ''}\0".encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(chunk)


def cache_key(source, providers: list[tuple[str, dict]], passes) -> str:
    """The key of a model compiled for ``providers`` after ``passes``."""
    import offload
    from offload.delegates import registry

    h = hashlib.sha256()
    backends = sorted((e.name, e.source) for e in registry.backends())
    settings = {
        "format": FORMAT,
        "version": offload.__version__,
        "sources": _source_stamp(),
        "backends": backends,
        "providers": [
            [name, {str(k): str(v) for k, v in sorted(options.items())}] for name, options in providers
        ],
        "passes": passes,
    }
    h.update(json.dumps(settings, sort_keys=True).encode())
    _model_digest(source, h)
    return h.hexdigest()


def _folder(cache_dir) -> Path:
    folder = Path(os.fspath(cache_dir))
    if folder.exists() and not folder.is_dir():
        raise OffloadError(f"cache_dir {folder}: not a folder")
    return folder


def lookup(cache_dir, key: str) -> tuple[str, dict] | None:
    """(the entry's .pte path, its description), or None when there is no complete entry."""
    folder = _folder(cache_dir)
    pte, described = folder / f"{key}.pte", folder / f"{key}.json"
    if not (pte.is_file() and described.is_file()):
        return None
    try:
        return str(pte), json.loads(described.read_text())
    except (OSError, ValueError):  # a damaged entry is a miss; storing again replaces it
        return None


def store(cache_dir, key: str, data: bytes, description: dict) -> str:
    """Write the entry; the .pte path."""
    folder = _folder(cache_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        replace_file(folder / f"{key}.pte", data)
        replace_file(folder / f"{key}.json", json.dumps(description).encode())
    except OSError as e:
        raise OffloadError(f"cache_dir {folder}: cannot write a cache entry: {e.strerror or e}") from None
    return str(folder / f"{key}.pte")


def clear_cache(cache_dir) -> int:
    """Remove every entry of the folder (its other files stay); how many files were removed."""
    folder = _folder(cache_dir)
    if not folder.is_dir():
        return 0
    removed = 0
    for path in folder.iterdir():
        if path.suffix in (".pte", ".json") and len(path.stem) == 64 and path.is_file():
            path.unlink()
            removed += 1
    return removed
