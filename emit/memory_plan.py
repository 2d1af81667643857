"""The memory plan: lifetimes over a plan's flat chain, and greedy best-fit offsets in one arena.

A lifetime is the instruction interval ``[first write, last read]`` (both ends inclusive, so an
operation's output never shares bytes with its inputs). Jumps back to an earlier instruction
form loops; a value that is live across a loop's back edge lives for the whole loop.

The one exception is an *overwrite*: an instruction whose kernel may write its output over an
input (an elementwise op, ``plan.WRITES_OVER``) where that input is read for the last time by it
and has at least the output's size. The two values then share one place (the output at its
start), their lifetimes joined, as onnxruntime's allocation planner reuses an input buffer for an
in-place kernel's output; a pool's smaller output may start where its input does too, its
kernel reading all of the input before writing any of the output (plan.SHRINKS_OVER).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from offload.schemas.generated.executorch_flatbuffer.KernelTypes import KernelTypes

from .evalues import scalar_dtype

ALIGNMENT = 16


@dataclass
class MemoryPlan:
    """Where each planned value lives: ``offsets[value index]`` within an arena of ``arena_size``."""

    offsets: dict[int, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    lifetimes: dict[int, tuple[int, int]] = field(default_factory=dict)
    arena_size: int = 0

    @property
    def total_size(self) -> int:
        """What the planned tensors would take without sharing: the sum of their sizes."""
        return sum(self.sizes.values())


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def lifetimes(
    accesses: Sequence[tuple[Iterable[int], Iterable[int]]],
    loops: Iterable[tuple[int, int]],
    live_out: Iterable[int] = (),
) -> dict[int, tuple[int, int]]:
    """Each written value's ``(first, last)`` instruction; ``accesses[i]`` is (reads, writes) of i.

    ``loops`` are ``(head, back_jump)`` instruction pairs; ``live_out`` values are read after the
    last instruction (the plan's outputs).
    """
    reads: dict[int, list[int]] = {}
    writes: dict[int, list[int]] = {}
    for pc, (r, w) in enumerate(accesses):
        for v in r:
            reads.setdefault(v, []).append(pc)
        for v in w:
            writes.setdefault(v, []).append(pc)
    end = len(accesses)
    for v in live_out:
        reads.setdefault(v, []).append(end)
    spans = {}
    for v, ws in writes.items():
        rs = reads.get(v, [])
        first, last = min(ws), max(ws + rs)
        for head, back in loops:
            if _live_across(ws, rs, head, back):
                first, last = min(first, head), max(last, back)
        spans[v] = (first, last)
    return spans


def _live_across(ws: list[int], rs: list[int], head: int, back: int) -> bool:
    """Whether a value's content must survive the loop's back edge (or the loop itself)."""
    inside = [p for p in ws + rs if head <= p <= back]
    if not inside:
        return False
    if any(p < head or p > back for p in ws + rs):
        return True  # flows into the loop from before it, or out of it to after it
    first_write = min((p for p in ws if head <= p <= back), default=None)
    return any(p <= first_write for p in rs if head <= p <= back) if first_write is not None else True


def place(
    sizes: Mapping[int, int], spans: Mapping[int, tuple[int, int]], alignment: int = ALIGNMENT
) -> tuple[dict[int, int], int]:
    """Greedy best fit, largest first: each value takes the smallest gap (between the values it
    overlaps in time) that holds it, else goes above them. Returns (offsets, arena size)."""
    return _place_groups({v: [(sizes[v], *spans[v])] for v in sizes}, alignment)


def _place_groups(
    groups: Mapping[int, list[tuple[int, int, int]]], alignment: int = ALIGNMENT
) -> tuple[dict[int, int], int]:
    """``place`` for groups of values that start at one offset (an output written over its
    input): ``groups[g]`` lists each member's ``(size, first, last)``, so that a group takes at
    each instruction only what its members live there take (ZFNet's first conv output, 4.6 MB,
    holds only its pool's 1.1 MB output after the pool). Largest group first, each at the start
    of the smallest gap that holds its largest member, every member clear of the values live with
    it, else above them all."""

    def largest(g):
        return max(size for size, _, _ in groups[g])

    order = sorted(groups, key=lambda g: (-largest(g), min(f for _, f, _ in groups[g]), g))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last) of placed members
    offsets: dict[int, int] = {}
    arena = 0
    for g in order:
        members, size = groups[g], largest(g)
        # per member, the byte ranges of the placed members live with it
        clear = [
            [(o, o + s) for o, s, f, e in placed if s > 0 and f <= last and first <= e]
            for _, first, last in members
        ]
        busy = sorted({r for c in clear for r in c})
        best, best_gap = None, None
        for start in sorted({0, *(_align(e, alignment) for _, e in busy)}):
            if any(lo < start + s and start < hi for (s, _, _), c in zip(members, clear) for lo, hi in c):
                continue
            above = [lo for lo, _ in busy if lo >= start + size]
            if not above:  # the top: taken when no gap holds the group
                best = start if best is None else best
            elif best_gap is None or min(above) - start < best_gap:
                best, best_gap = start, min(above) - start
        offsets[g] = best
        placed.extend((best, s, f, e) for s, f, e in members)
        arena = max(arena, _align(best + size, alignment))
    return offsets, arena


def plan(
    sizes: Mapping[int, int],
    accesses: Sequence[tuple[Iterable[int], Iterable[int]]],
    loops: Iterable[tuple[int, int]],
    live_out: Iterable[int] = (),
    alignment: int = ALIGNMENT,
    overwrites: Iterable[tuple[int, int, int]] = (),
) -> MemoryPlan:
    """Plan the values in ``sizes`` (value index → bytes) over the chain described by ``accesses``.

    ``overwrites`` are ``(pc, output, input)``: instruction ``pc`` may write ``output`` over
    ``input``; they share a place where ``input``'s lifetime ends at ``pc``, ``output``'s starts
    there and is no larger than ``input``.

    A smaller output tied to its input's place can cost more than it saves (ResNet-50's stem
    pool output, held through the first block, pushed that block's 3.2 MB values off the start
    of the arena: 8.0 MB against 7.2); where there are such overwrites the plan is made without
    them too, and the smaller arena kept."""
    spans = lifetimes(accesses, list(loops), live_out)
    # A planned value the chain never writes (dead code) still needs a place; give it the start.
    spans = {v: spans.get(v, (0, 0)) for v in sizes}
    overwrites = list(overwrites)
    offsets, arena = _place_shared(sizes, spans, overwrites, alignment)
    same_size = [(pc, out, src) for pc, out, src in overwrites if sizes.get(out) == sizes.get(src)]
    if len(same_size) < len(overwrites):
        other = _place_shared(sizes, spans, same_size, alignment)
        if other[1] < arena:
            offsets, arena = other
    return MemoryPlan(offsets, dict(sizes), spans, arena)


def _place_shared(sizes, spans, overwrites, alignment: int) -> tuple[dict[int, int], int]:
    """(offsets, arena size) with the accepted overwrites' values sharing a place (_share)."""
    owner = _share(sizes, spans, overwrites)
    groups: dict[int, list[tuple[int, int, int]]] = {}
    for v, o in owner.items():
        groups.setdefault(o, []).append((sizes[v], *spans[v]))
    offsets, arena = _place_groups(groups, alignment)
    return {v: offsets[owner[v]] for v in sizes}, arena


def _share(
    sizes: Mapping[int, int], spans: Mapping[int, tuple[int, int]], overwrites: Iterable[tuple[int, int, int]]
) -> dict[int, int]:
    """Each planned value's group (the value whose place it takes): itself, or for an accepted
    overwrite the group of the input it writes over."""
    owner = {v: v for v in sizes}
    taken: set[int] = set()  # inputs already written over (one output each)
    for pc, out, src in sorted(overwrites):
        if out not in sizes or src not in sizes or src in taken or sizes[out] > sizes[src]:
            continue
        if spans[src][1] != pc or spans[out][0] != pc or owner[out] != out:
            continue
        owner[out] = owner[src]
        taken.add(src)
    return owner


@dataclass
class PlanMemory:
    """One plan's arena next to what its planned tensors would need unshared."""

    plan: str
    arena_bytes: int
    planned_bytes: int
    planned_tensors: int


def summarize(program) -> list[PlanMemory]:
    """Arena size vs the sum of planned tensor sizes, per plan of a ProgramT (written or parsed)."""
    out = []
    for p in program.executionPlan or []:
        total, count = 0, 0
        for e in p.values or []:
            if e.valType == KernelTypes.Tensor and e.val.allocationInfo is not None:
                n = 1
                for d in e.val.sizes if e.val.sizes is not None else ():
                    n *= int(d)
                total += n * scalar_dtype(e.val.scalarType).itemsize
                count += 1
        sizes = [int(x) for x in (p.nonConstBufferSizes if p.nonConstBufferSizes is not None else [])]
        out.append(PlanMemory(p.name or "", sum(sizes[1:]), total, count))
    return out
