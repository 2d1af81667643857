"""``save``: an IR program as the bytes of a .pte file (ExecuTorch's format, see docs/pte.md)."""

from __future__ import annotations

import os

from offload.emit import lower
from offload.ir import Program
from offload.schemas import pte


def save(program: Program, path: str | os.PathLike | None = None) -> bytes | None:
    """Lower ``program`` and serialize it: written to ``path`` when given, else returned as bytes."""
    program_t, segments = lower(program)
    data = pte.serialize(program_t, segments)
    if path is None:
        return data
    with open(os.fspath(path), "wb") as f:
        f.write(data)
    return None
