"""The partitioner: tags each op with a backend, then fuses tagged ops into convex partitions.

Tagging. Only the ops of a function's top-level block are candidates; ops inside If/Loop/Scan
bodies stay with their parent op. A candidate goes to the first backend (in priority order)
whose ``supports(op)`` is ok, unless it is denied (by op type or node name) or not in
``allow_ops``. An op with graph attributes is tagged only if a backend claims it.

Fusing. The ops are walked in program order. For each op we keep ``deps[op]``, the set of
partitions it depends on, directly or through any chain of ops. A tagged op ``n``:

1. joins the partition P of one of its producers when P has n's backend and no *other*
   producer of n (one outside P) has P in its deps: a path P → outside → n would otherwise
   make "P plus n" non-convex, and collapsing it into one op would create a cycle;
2. else starts a new partition (and remembers which partition it was refused, for the report).

Then two partitions P, Q of one backend are merged (across CPU ops they do not depend on)
when no producer outside P ∪ Q of an op in Q has P in its deps, and vice versa: no path
leaves one and enters the other. Last, partitions with fewer than ``min_ops`` ops dissolve
back to the CPU. Because deps count every partition, not only the op's own, no chain of
partitions P → R → P can form either, so the lowered program stays acyclic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from offload.delegates.backend import BackendCompiler, Support
from offload.errors import BackendUnavailableError
from offload.ir import Function, Operation, Program
from offload.ir.rewrite import reads, top_level_op

from .report import Partition, Placement, Reason, Report


class _Groups:
    """Partitions under construction, with a union-find so that merged ids stay comparable."""

    def __init__(self):
        self.parent: list[int] = []

    def new(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, keep: int, drop: int) -> None:
        self.parent[self.find(drop)] = self.find(keep)


class Partitioner:
    """Assigns ops to backends (in priority order) and groups them into convex partitions."""

    def __init__(
        self,
        backends: Sequence[str | BackendCompiler],
        *,
        allow_ops: Iterable[str] | None = None,
        deny_ops: Iterable[str] = (),
        deny_nodes: Iterable[str] = (),
        min_ops: int = 1,
    ):
        if isinstance(backends, (str, BackendCompiler)):
            backends = [backends]
        self.backends = [resolve_compiler(b) for b in backends]
        self.allow_ops = None if allow_ops is None else set(allow_ops)
        self.deny_ops = set(deny_ops)
        self.deny_nodes = set(deny_nodes)
        self.min_ops = max(1, min_ops)

    def partition(self, program: Program) -> Report:
        """Partition every function of ``program`` (read only); the report lists the partitions."""
        report = Report()
        for fn in program.functions.values():
            _FunctionPass(self, fn, report).run()
        return report

    # Tagging ------------------------------------------------------------------------------

    def tag(self, op: Operation) -> tuple[BackendCompiler | None, Reason | None, str]:
        """The backend for ``op``, or why it has none."""
        types = {op.op_type, op.qualified_type}
        if op.name and op.name in self.deny_nodes:
            return None, Reason.DENIED_NODE, f"node '{op.name}' is denied"
        if types & self.deny_ops:
            return None, Reason.DENIED_OP, f"op type {op.qualified_type} is denied"
        if self.allow_ops is not None and not types & self.allow_ops:
            return None, Reason.NOT_ALLOWED, f"op type {op.qualified_type} is not in allow_ops"
        refusals = []
        for backend in self.backends:
            support = _ask(backend, op)
            if support.ok:
                return backend, None, ""
            refusals.append(f"{backend.name}: {support.reason or 'not supported'}")
        return None, Reason.NO_BACKEND, "; ".join(refusals) or "no backends given"


def _ask(backend: BackendCompiler, op: Operation) -> Support:
    support = backend.supports(op)
    return support if isinstance(support, Support) else Support(bool(support))


def resolve_compiler(backend: str | BackendCompiler) -> BackendCompiler:
    """A backend's compile half, from an instance or a registered name."""
    if isinstance(backend, BackendCompiler):
        return backend
    try:
        from offload.delegates import registry
    except ImportError:
        raise BackendUnavailableError(f"backend '{backend}': no backend registry in this install") from None
    return registry.get(backend).compiler()


class _FunctionPass:
    """Tagging and fusing for one function; adds its placements and partitions to the report."""

    def __init__(self, partitioner: Partitioner, fn: Function, report: Report):
        self.p, self.fn, self.report = partitioner, fn, report
        self.groups = _Groups()
        self.members: dict[int, list[Operation]] = {}  # group id → ops (only for roots)
        self.backend_of: dict[int, BackendCompiler] = {}
        self.group_of: dict[int, int] = {}  # id(op) → group id (raw; resolve with find)
        self.deps: dict[int, set[int]] = {}  # id(op) → raw group ids it depends on
        self.refused: dict[int, int] = {}  # id(op) → group it could not join (cycle)
        self.untagged: dict[int, tuple[Reason, str]] = {}
        self.position: dict[int, int] = {}  # id(op) → index in the block, for ordering
        self.producers: dict[int, list[Operation]] = {}  # id(op) → the top-level ops it reads

    def run(self) -> None:
        for op in self.fn.body.operations:
            backend, reason, detail = self.p.tag(op)
            if backend is None:
                self.untagged[id(op)] = (reason, detail)
            self._place(op, backend)
        self._merge()
        self._finish()

    def _group(self, op: Operation) -> int | None:
        k = self.group_of.get(id(op))
        return None if k is None else self.groups.find(k)

    def _producers(self, op: Operation) -> list[Operation]:
        cached = self.producers.get(id(op))
        if cached is None:
            seen: dict[int, Operation] = {}
            for v in reads(op):
                if v.producer is not None:
                    producer = top_level_op(v.producer)
                    seen.setdefault(id(producer), producer)
            cached = self.producers[id(op)] = list(seen.values())
        return cached

    def _deps(self, op: Operation) -> set[int]:
        return {self.groups.find(k) for k in self.deps.get(id(op), ())}

    def _place(self, op: Operation, backend: BackendCompiler | None) -> None:
        producers = self._producers(op)
        deps: set[int] = set()
        for q in producers:
            deps |= self._deps(q)
            if self._group(q) is not None:
                deps.add(self._group(q))
        self.deps[id(op)] = deps
        if backend is None:
            return
        target = None
        for q in producers:
            k = self._group(q)
            if k is None or self.backend_of[k] is not backend:
                continue
            if self._convex_with(k, producers) and (self._inside(k, producers) or self._acyclic({id(op): k})):
                target = k
                break
            self.refused.setdefault(id(op), k)
        if target is None:
            target = self.groups.new()
            self.members[target], self.backend_of[target] = [], backend
        self.members[target].append(op)
        self.group_of[id(op)] = target

    def _inside(self, k: int, producers: list[Operation]) -> bool:
        """Whether every producer is in group k or touches no group at all (no loop possible)."""
        return all(self._group(q) == k or (self._group(q) is None and not self._deps(q)) for q in producers)

    def _convex_with(self, k: int, producers: list[Operation]) -> bool:
        """Rule 1: no producer outside group k depends on k."""
        return all(self._group(q) == k or k not in self._deps(q) for q in producers)

    def _merge(self) -> None:
        """Merge same-backend groups pairwise while the union stays convex."""
        changed = True
        while changed:
            changed = False
            roots = sorted(self.members)
            for i, a in enumerate(roots):
                for b in roots[i + 1 :]:
                    if self.backend_of[a] is self.backend_of[b] and self._mergeable(a, b):
                        self.groups.union(a, b)
                        self.members[a] = sorted(self.members[a] + self.members.pop(b), key=self._order)
                        changed = True
                        break
                if changed:
                    break

    def _order(self, op: Operation) -> int:
        if len(self.position) != len(self.fn.body.operations):
            self.position = {id(o): i for i, o in enumerate(self.fn.body.operations)}
        return self.position[id(op)]

    def _mergeable(self, a: int, b: int) -> bool:
        both = {a, b}
        for k, other in ((a, b), (b, a)):
            for op in self.members[other]:
                for q in self._producers(op):
                    if self._group(q) not in both and k in self._deps(q):
                        return False
        return self._acyclic({id(op): a for op in self.members[b]})

    def _acyclic(self, moves: dict[int, int]) -> bool:
        """Whether the graph stays acyclic with every group collapsed into one node.

        The dependency sets above see paths between ops; collapsing a group also joins each
        of its inputs to each of its outputs, which can close a loop through another group
        (A feeds group G's first op, G's second op feeds A). This check sees those, over the
        ops placed so far with ``moves`` (op → group) applied.
        """

        def node(op: Operation):
            k = moves.get(id(op))
            k = self._group(op) if k is None else self.groups.find(k)
            return ("g", k) if k is not None else ("op", id(op))

        placed = [op for op in self.fn.body.operations if id(op) in self.deps or id(op) in moves]
        edges: dict[tuple, set[tuple]] = {}
        indegree: dict[tuple, int] = {}
        for op in placed:
            target = node(op)
            indegree.setdefault(target, 0)
            for q in self._producers(op):
                if id(q) not in self.deps and id(q) not in moves:
                    continue
                source = node(q)
                if source != target and target not in edges.setdefault(source, set()):
                    edges[source].add(target)
                    indegree[target] = indegree.get(target, 0) + 1
        ready = [n for n, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            n = ready.pop()
            seen += 1
            for m in edges.get(n, ()):
                indegree[m] -= 1
                if indegree[m] == 0:
                    ready.append(m)
        return seen == len(indegree)

    def _finish(self) -> None:
        """Dissolve small groups, number the rest, and write one placement per op."""
        partitions: dict[int, Partition] = {}
        small: dict[int, int] = {}
        for k in sorted(self.members, key=lambda k: self._order(self.members[k][0])):
            ops = self.members[k]
            if len(ops) < self.p.min_ops:
                small[k] = len(ops)
                continue
            part = Partition(len(self.report.partitions), self.backend_of[k], self.fn, ops)
            partitions[k] = part
            self.report.partitions.append(part)
        for op in self.fn.body.operations:
            placement = self._placement(op, partitions, small)
            self.report.placements.append(placement)
            self._place_nested(op, placement)

    def _placement(self, op: Operation, partitions: dict[int, Partition], small: dict[int, int]) -> Placement:
        where = (self.fn.name, op)
        k = self._group(op)
        if k in partitions:
            part = partitions[k]
            return Placement(*where, backend=part.backend.name, partition=part.id)
        if k is None:
            reason, detail = self.untagged[id(op)]
            return Placement(*where, reason=reason, detail=detail)
        size = f"its partition has {small[k]} op(s), fewer than min_ops={self.p.min_ops}"
        if id(op) in self.refused:
            detail = f"joining a {self.backend_of[k].name} partition would create a cycle, and {size}"
            return Placement(*where, reason=Reason.CYCLE, detail=detail)
        return Placement(*where, reason=Reason.BELOW_MIN_SIZE, detail=size)

    def _place_nested(self, parent: Operation, placement: Placement) -> None:
        for block in parent.blocks:
            for op in block.walk():
                if placement.partition is not None:
                    # A delegated If/Loop/Scan takes its bodies with it.
                    self.report.placements.append(
                        Placement(
                            self.fn.name,
                            op,
                            backend=placement.backend,
                            partition=placement.partition,
                            nested=True,
                        )
                    )
                else:
                    detail = f"inside the body of {parent.qualified_type} '{parent.name}'"
                    self.report.placements.append(
                        Placement(
                            self.fn.name, op, reason=Reason.CONTROL_FLOW_BODY, detail=detail, nested=True
                        )
                    )
