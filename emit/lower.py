"""``lower``: an IR program → ExecuTorch's ProgramT and its segments (the constant data)."""

from __future__ import annotations

from collections import deque

import numpy as np

from offload.ir import Block, Program, Value
from offload.schemas.generated.executorch_flatbuffer.Program import ProgramT
from offload.schemas.generated.executorch_flatbuffer.SubsegmentOffsets import SubsegmentOffsetsT
from offload.schemas.pte import DEFAULT_CONSTANT_ALIGNMENT, ConstantData

from .delegates import DelegateBlobs
from .evalues import constant_bytes
from .plan import PlanBuilder

CONSTANT_SEGMENT = 0


class _Lowering:
    """Program-wide state: the constant segment and the queue of sub-plans still to build."""

    def __init__(self, program: Program, alignment: int):
        self.program = program
        self.constants = ConstantData(alignment)
        self._by_value: dict[int, int] = {}
        self._by_bytes: dict[bytes, int] = {}
        self._keep: list = []  # values whose id() keys _by_value
        self.plan_names: set[str] = set(program.functions)
        self.pending: deque = deque()
        self.next_index = len(program.functions)
        self.blobs = DelegateBlobs(first_segment=CONSTANT_SEGMENT + 1)

    def constant_index(self, array: np.ndarray, value: Value | None = None) -> int:
        """The data_buffer_idx of this constant's bytes (identical bytes are stored once)."""
        if value is not None and id(value) in self._by_value:
            return self._by_value[id(value)]
        data = constant_bytes(array)
        index = self._by_bytes.get(data)
        if index is None:
            index = self._by_bytes[data] = self.constants.add(data)
        if value is not None:
            self._by_value[id(value)] = index
            self._keep.append(value)
        return index

    def add_subplan(
        self, name: str, block: Block, captured: list[Value], keep_constants: bool = False
    ) -> int:
        """Queue a block (a graph attribute, a delegate's fallback) as its own plan; returns its index."""
        unique, k = name, 1
        while unique in self.plan_names:
            k += 1
            unique = f"{name}~{k}"
        self.plan_names.add(unique)
        index = self.next_index
        self.next_index += 1
        self.pending.append((unique, block, captured, keep_constants))
        return index


def lower(
    program: Program, *, constant_alignment: int = DEFAULT_CONSTANT_ALIGNMENT
) -> tuple[ProgramT, list[bytes]]:
    """The ProgramT of ``program`` (one plan per function, then sub-plans) and its segments.

    Raises UnsupportedOpError for an op that cannot be lowered (no schema, a Loop that never ends…).
    """
    state = _Lowering(program, constant_alignment)
    plans = [
        PlanBuilder(state, name, fn.body, [], states=fn.states).build()
        for name, fn in program.functions.items()
    ]
    while state.pending:
        name, block, captured, keep_constants = state.pending.popleft()
        plans.append(PlanBuilder(state, name, block, captured, keep_constants).build())
    p = ProgramT()
    p.version = 0
    p.executionPlan = plans
    p.constantBuffer = []
    p.backendDelegateData = state.blobs.inline_data()
    segment = SubsegmentOffsetsT()
    segment.segmentIndex = CONSTANT_SEGMENT
    segment.offsets = list(state.constants.offsets)
    p.constantSegment = segment
    p.mutableDataSegments = []
    # Delegate blobs over the inline limit follow the constants, in the order first referenced.
    return p, [state.constants.payload(), *state.blobs.segments]
