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


def to_backend(program: Program, backend, compile_specs=None) -> Program:
    """A copy of ``program`` whose supported parts run on backend delegates (see docs/pte.md).

    ``backend`` is a backend name, a list of names in priority order, or a ``Partitioner``.
    ``compile_specs`` maps a backend name to a list of ``CompileSpec`` or to a dict of
    key → value. Each partition becomes one ``offload::Delegate`` op whose fallback block is
    the partition itself; the input program is left unchanged.
    """
    from offload.ir import verify
    from offload.ir.clone import clone_program
    from offload.partitioner import Partitioner
    from offload.partitioner.lowering import lower_partitions, normalize_specs

    partitioner = backend if isinstance(backend, Partitioner) else Partitioner(_as_list(backend))
    specs = normalize_specs(compile_specs, partitioner)
    lowered = clone_program(program)
    lower_partitions(lowered, partitioner, specs)
    verify(lowered)
    return lowered


def _as_list(backend) -> list:
    return [backend] if isinstance(backend, str) or not isinstance(backend, (list, tuple)) else list(backend)
