"""What partitioning makes: the partitions, and the report of where every op went and why (with a
summary and its text table)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from offload.delegates.backend import BackendCompiler
from offload.ir import Function, Operation, TensorType, Value
from offload.ir.rewrite import reads, top_level_op


@dataclass(eq=False)
class Partition:
    """One group of ops of one function that one backend runs as a single delegate."""

    id: int
    backend: BackendCompiler
    fn: Function
    ops: list[Operation] = field(default_factory=list)

    @property
    def function(self) -> str:
        return self.fn.name

    def inputs(self) -> list[Value]:
        """Non-constant values the partition reads but does not produce, in first-use order."""
        return [v for v in self._reads() if not v.is_constant]

    def weights(self) -> list[Value]:
        """Constant values (block constants) the partition reads."""
        return [v for v in self._reads() if v.is_constant and v.producer is None]

    def outputs(self) -> list[Value]:
        """Values produced inside and used outside (by other ops or as function results)."""
        inside = {id(op) for op in self.ops}
        results = {id(v) for v in self.fn.outputs}
        out = []
        for op in self.ops:
            for v in op.outputs:
                used_outside = any(id(top_level_op(u)) not in inside for u in v.users)
                if used_outside or id(v) in results:
                    out.append(v)
        return out

    def _reads(self) -> list[Value]:
        inside = {id(op) for op in self.ops}
        seen: dict[int, Value] = {}
        for op in self.ops:
            for v in reads(op):
                if v.producer is None or id(v.producer) not in inside:
                    seen.setdefault(id(v), v)
        return list(seen.values())


class Reason(enum.Enum):
    """Why an op stayed on the CPU."""

    NO_BACKEND = "no backend supports it"
    DENIED_OP = "denied by op type"
    DENIED_NODE = "denied by node name"
    NOT_ALLOWED = "not in allow_ops"
    BELOW_MIN_SIZE = "below minimum size"
    CYCLE = "would create a cycle"
    CONTROL_FLOW_BODY = "inside a control-flow body"


@dataclass
class Placement:
    """Where one op went: a backend's partition, or the CPU with a reason."""

    function: str
    op: Operation
    backend: str | None = None
    partition: int | None = None
    reason: Reason | None = None
    detail: str = ""
    nested: bool = False  # inside an If/Loop/Scan body (not counted in the summary)

    @property
    def delegated(self) -> bool:
        return self.partition is not None

    @property
    def label(self) -> str:
        if self.op.name:
            return self.op.name
        return self.op.outputs[0].name if self.op.outputs else self.op.op_type


def value_bytes(v: Value) -> int | None:
    """Size of a tensor value from its static type; None when its shape or type is not known."""
    t = v.type
    if not isinstance(t, TensorType) or not t.is_static:
        return None
    n = 1
    for d in t.shape:
        n *= d
    return n * t.dtype.numpy.itemsize


@dataclass
class Report:
    """Placements of every op (nested ones included) and the partitions, in program order."""

    placements: list[Placement] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)

    def boundary(self) -> list[Value]:
        """Values crossing between the CPU and a delegate (or between delegates), each once."""
        seen: dict[int, Value] = {}
        for part in self.partitions:
            for v in part.inputs():
                seen.setdefault(id(v), v)
            for v in part.outputs():
                seen.setdefault(id(v), v)
        return list(seen.values())

    def summary(self) -> dict:
        top = [p for p in self.placements if not p.nested]
        delegated = sum(p.delegated for p in top)
        sizes = [value_bytes(v) for v in self.boundary()]
        return {
            "partitions": len(self.partitions),
            "ops": len(top),
            "delegated_ops": delegated,
            "delegated_percent": 100.0 * delegated / len(top) if top else 0.0,
            "boundary_tensors": len(sizes),
            "boundary_bytes": sum(s for s in sizes if s is not None),
            "boundary_unknown": sum(s is None for s in sizes),
        }


def format_report(report: Report) -> str:
    """A table (one row per op) and the summary, as text."""
    rows = [("function", "op", "type", "placement", "reason")]
    for p in report.placements:
        where = f"{p.backend}#{p.partition}" if p.delegated else "cpu"
        why = "" if p.delegated else f"{p.reason.value}: {p.detail}" if p.detail else p.reason.value
        rows.append((p.function, p.label, p.op.qualified_type, where, why))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    s = report.summary()
    unknown = f" (+{s['boundary_unknown']} of unknown size)" if s["boundary_unknown"] else ""
    lines += [
        "",
        f"partitions: {s['partitions']}",
        f"delegated ops: {s['delegated_ops']}/{s['ops']} ({s['delegated_percent']:.1f}%)",
        f"boundary tensors: {s['boundary_tensors']}, {s['boundary_bytes']} bytes{unknown}",
    ]
    for part in report.partitions:
        lines.append(f"  partition {part.id} ({part.backend.name}, {part.function}): {len(part.ops)} ops")
    return "\n".join(line.rstrip() for line in lines)
