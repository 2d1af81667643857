"""Delegate lowering helpers: processed blobs (inline or segment), BackendDelegate entries, reserved specs.

An ``offload::Delegate`` op becomes a ``BackendDelegate`` in its plan's ``delegates`` table, a
``DelegateCall`` in the chain, and a fallback sub-plan (docs/pte.md, "Delegates"). This module
builds the flatbuffer objects; ``plan.PlanBuilder`` decides where they go.
"""

from __future__ import annotations

import numpy as np

from offload.errors import UnsupportedOpError
from offload.schemas.generated.executorch_flatbuffer.BackendDelegate import BackendDelegateT
from offload.schemas.generated.executorch_flatbuffer.BackendDelegateDataReference import (
    BackendDelegateDataReferenceT,
)
from offload.schemas.generated.executorch_flatbuffer.BackendDelegateInlineData import (
    BackendDelegateInlineDataT,
)
from offload.schemas.generated.executorch_flatbuffer.CompileSpec import CompileSpecT
from offload.schemas.generated.executorch_flatbuffer.DataLocation import DataLocation

INLINE_LIMIT = 64 * 1024  # blobs up to this size go into Program.backend_delegate_data
RESERVED_PREFIX = "offload."  # spec keys offload keeps for itself; stripped before init
FALLBACK_PLAN_KEY = "offload.fallback_plan"
FP16_ERROR_KEY = "offload.fp16_error"  # measured fp16 error (``offload.calibrate``), for inspect
# The name of delegate k's fallback plan in plan ``plan``: a dunder prefix, so that runtimes that
# list every execution plan as a method (ExecuTorch's) show it as an internal one. offload's
# runtime finds a fallback by FALLBACK_PLAN_KEY, never by name: files that named fallbacks
# "<plan>/delegate<k>/fallback" load the same.
FALLBACK_PLAN_NAME = "__offload_fallback__/{plan}/{k}"


def fallback_plan_name(plan: str, k: int) -> str:
    return FALLBACK_PLAN_NAME.format(plan=plan, k=k)


class DelegateBlobs:
    """The program's processed blobs: inline ones and segment ones, identical blobs stored once."""

    def __init__(self, first_segment: int):
        self.first_segment = first_segment  # segments before this one hold constants
        self.inline: list[bytes] = []
        self.segments: list[bytes] = []
        self._where: dict[bytes, tuple[int, int]] = {}

    def reference(self, blob: bytes) -> BackendDelegateDataReferenceT:
        where = self._where.get(blob)
        if where is None:
            if len(blob) <= INLINE_LIMIT:
                where = (DataLocation.INLINE, len(self.inline))
                self.inline.append(blob)
            else:
                where = (DataLocation.SEGMENT, self.first_segment + len(self.segments))
                self.segments.append(blob)
            self._where[blob] = where
        ref = BackendDelegateDataReferenceT()
        ref.location, ref.index = where
        return ref

    def inline_data(self) -> list[BackendDelegateInlineDataT]:
        out = []
        for blob in self.inline:
            d = BackendDelegateInlineDataT()
            d.data = np.frombuffer(blob, dtype=np.uint8)  # numpy packs fast; a list would not
            out.append(d)
        return out


def spec_pairs(specs, where: str) -> list[tuple[str, bytes]]:
    """(key, value) of each compile spec of a Delegate op; reserved ``offload.*`` keys are refused."""
    out = []
    for s in specs or []:
        key, value = getattr(s, "key", None), getattr(s, "value", None)
        if not isinstance(key, str) or not isinstance(value, (bytes, bytearray)):
            raise UnsupportedOpError(
                f"{where}: compile specs must be CompileSpec(key: str, value: bytes), got {s!r}"
            )
        if key.startswith(RESERVED_PREFIX):
            raise UnsupportedOpError(f"{where}: compile spec key '{key}' is reserved for offload")
        out.append((key, bytes(value)))
    return out


def backend_delegate(
    backend: str,
    processed: BackendDelegateDataReferenceT,
    specs: list[tuple[str, bytes]],
    fallback_plan: int,
    notes: dict[str, bytes] | None = None,
) -> BackendDelegateT:
    """``notes``: offload's own reserved specs beside the fallback plan's (never given to the backend)."""
    d = BackendDelegateT()
    d.id = backend
    d.processed = processed
    reserved = [(FALLBACK_PLAN_KEY, str(fallback_plan).encode()), *(notes or {}).items()]
    d.compileSpecs = [_spec(k, v) for k, v in [*specs, *reserved]]
    return d


def _spec(key: str, value: bytes) -> CompileSpecT:
    s = CompileSpecT()
    s.key, s.value = key, np.frombuffer(value, dtype=np.uint8) if value else []
    return s
