"""The delegation report: where each op of a model runs and why, what crossing between host and
device costs, and a measured profile, as data (``build``) and as one self-contained HTML page
(``render_html``) with the partitioned graph drawn as SVG.

The graph is laid out by grandalf's Sugiyama (layered) layout: ops in layers along the data
flow, crossings reduced; each op is coloured by where it runs, each partition boxed, and edges
that cross between the CPU and a delegate (or between delegates) labelled with their bytes.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter

import numpy as np

from offload.errors import OffloadError
from offload.ir import Program, TensorType

COLORS = {"cpu": "#d9d9d9", "backend": "#8fd18f"}  # fill of an op on the CPU / on a delegate
NODE_W, NODE_H, GAP = 150, 30, 60  # px: op box, and the space between laid-out components


def build(program: Program, backend, compile_specs=None, *, measure: bool = True, seed: int = 0) -> dict:
    """The report's data: ops (placement, reason), edges (tensor, bytes, whether it crosses),
    reasons grouped with counts, the partition summary, and when ``measure`` a profile of one run
    (random inputs; static input shapes only) and, under precision=fp16, each output's error
    against the fp32 delegate."""
    from offload.ir.rewrite import reads, top_level_op
    from offload.partitioner import Partitioner
    from offload.partitioner.report import value_bytes

    partitioner = backend if isinstance(backend, Partitioner) else Partitioner(backend)
    report = partitioner.partition(program)
    fn = program.main
    placed = [p for p in report.placements if not p.nested and p.function == fn.name]
    index = {id(p.op): k for k, p in enumerate(placed)}
    ops = [
        {
            "id": k,
            "name": p.label,
            "type": p.op.qualified_type,
            "runs_on": f"{p.backend}#{p.partition}" if p.delegated else "cpu",
            "partition": p.partition,
            "reason": None
            if p.delegated
            else (f"{p.reason.value}: {p.detail}" if p.detail else p.reason.value),
        }
        for k, p in enumerate(placed)
    ]
    edges = []
    for p in placed:
        seen = set()
        for v in reads(p.op):
            if v.producer is None or id(v) in seen:
                continue
            seen.add(id(v))
            source = index.get(id(top_level_op(v.producer)))
            if source is None or source == index[id(p.op)]:
                continue
            crosses = ops[source]["runs_on"] != ops[index[id(p.op)]]["runs_on"]
            edges.append(
                {
                    "source": source,
                    "target": index[id(p.op)],
                    "tensor": v.name,
                    "bytes": value_bytes(v),
                    "crosses": crosses,
                }
            )
    grouped: dict[str, list[str]] = {}
    for op in ops:
        if op["reason"] is not None:
            grouped.setdefault(op["reason"], []).append(op["name"])
    reasons = [
        {"reason": r, "count": len(names), "ops": names}
        for r, names in sorted(grouped.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    data = {
        "model": program.source or "model",
        "backends": [b.name for b in partitioner.backends],
        "ops": ops,
        "edges": edges,
        "reasons": reasons,
        "summary": report.summary(),
        "op_types_on_cpu": dict(Counter(op["type"] for op in ops if op["runs_on"] == "cpu").most_common()),
    }
    if measure:
        data["measured"] = _measure(program, partitioner, compile_specs, seed)
    return data


def _inputs(program: Program, seed: int) -> dict | None:
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in program.main.inputs:
        t = v.type
        if not isinstance(t, TensorType) or not t.is_static:
            return None
        dtype = np.dtype(t.dtype.numpy)
        if dtype.kind == "f":
            feeds[v.name] = rng.standard_normal(t.shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[v.name] = rng.integers(0, 4, t.shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[v.name] = rng.integers(0, 2, t.shape).astype(bool)
        else:
            return None
    return feeds


def _measure(program: Program, partitioner, compile_specs, seed: int) -> dict:
    """One profiled run (after a warm-up run) of the lowered model on random inputs."""
    import offload
    from offload.profile import Profile

    feeds = _inputs(program, seed)
    if feeds is None:
        return {"skipped": "the model has symbolic or non-numeric inputs: run it yourself with a profile"}
    try:
        lowered = offload.to_backend(program, partitioner, compile_specs)
        module = offload.runtime.load(offload.save(lowered))
        outputs = module.run(feeds)
        profile = Profile()
        module.run(feeds, profile=profile)
    except OffloadError as e:
        return {"skipped": f"the lowered model did not run: {e}"}
    events = profile.events
    method = module.method(module.method_names[0])
    delegates = [
        {"pc": e.args.get("pc"), "ms": e.dur / 1e6, "runs_on": d.runs_on}
        for e, d in zip((e for e in events if e.cat == "delegate"), method.delegates)
    ]
    measured = {
        "total_ms": sum(
            e.dur for e in events if e.cat == "plan" and e.name == f"plan {module.method_names[0]}"
        )
        / 1e6,
        "cpu_kernels_ms": sum(e.dur for e in events if e.cat == "kernel") / 1e6,
        "delegate_calls": delegates,
        "device_kernels_ms": sum(e.dur for e in events if e.cat == "device") / 1e6,
        "copies": {
            name: sum(e.args.get("bytes", 0) for e in events if e.cat == "copy" and e.name == name)
            for name in ("copy to device", "copy to host")
        },
        # each backend's own account of its delegate: shapes, and under fp16 what stayed float32
        "details": [
            f"{d.backend}: {text}" for d, text in zip(method.delegates, method.delegate_details) if text
        ],
    }
    precision = _spec(compile_specs, partitioner, "precision")
    if precision == "fp16":
        reference = offload.runtime.load(offload.save(offload.to_backend(program, partitioner))).run(feeds)
        measured["fp16_error"] = {
            name: _error(outputs[name], reference[name]) for name in reference if name in outputs
        }
    return measured


def _spec(compile_specs, partitioner, key: str) -> str | None:
    from offload.partitioner.lowering import normalize_specs

    for specs in normalize_specs(compile_specs, partitioner).values():
        for spec in specs:
            if spec.key == key:
                return spec.text()
    return None


def _error(got, want) -> dict:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(got == want, 0.0, np.abs(got - want))  # equal infinities: no error
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return {
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "max_rel": float(diff.max() / scale) if scale else 0.0,
    }


# ---- the picture ---------------------------------------------------------------------------------


def layout(
    data: dict,
) -> tuple[dict[int, tuple[float, float]], list[list[tuple[float, float]]], float, float]:
    """Op centres, edge routes and the picture's size: grandalf's Sugiyama layout per connected
    component, components side by side."""
    try:
        from grandalf.graphs import Edge, Graph, Vertex
        from grandalf.layouts import SugiyamaLayout
    except ImportError:
        raise OffloadError(
            "the report's graph is laid out by grandalf, which is not installed: pip install 'offload[report]'"
        ) from None

    class _Box:
        w, h = NODE_W, NODE_H
        xy = (0.0, 0.0)

    class _Route:
        def __init__(self):
            self.points: list = []

        def setpath(self, points):
            self.points = list(points)

    vertices = [Vertex(op["id"]) for op in data["ops"]]
    for v in vertices:
        v.view = _Box()
    edges = [Edge(vertices[e["source"]], vertices[e["target"]]) for e in data["edges"]]
    for e in edges:
        e.view = _Route()
    graph = Graph(vertices, edges)
    centres: dict[int, tuple[float, float]] = {}
    offset, height = GAP / 2, 0.0
    for component in graph.C:
        sugiyama = SugiyamaLayout(component)
        sugiyama.init_all()
        sugiyama.draw()
        xs = [v.view.xy[0] for v in component.sV]
        left, right = min(xs) - NODE_W / 2, max(xs) + NODE_W / 2
        for v in component.sV:
            x, y = v.view.xy
            centres[v.data] = (x - left + offset, y + GAP / 2)
            height = max(height, y + GAP)
        for e in component.sE:
            e.view.points = [(x - left + offset, y + GAP / 2) for x, y in (e.view.points or [])]
        offset += right - left + GAP
    routes = []
    for e, edge in zip(edges, data["edges"]):
        points = e.view.points or [centres[edge["source"]], centres[edge["target"]]]
        routes.append(points)
    return centres, routes, max(offset, NODE_W), max(height, NODE_H + GAP)


def render_svg(data: dict) -> str:
    """The partitioned graph: one <g class="op"> per op, partitions as dashed boxes, crossing
    edges labelled with their bytes."""
    centres, routes, width, height = layout(data)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">'
    ]
    parts: dict[str, list[tuple[float, float]]] = {}
    for op in data["ops"]:
        if op["partition"] is not None:
            parts.setdefault(op["runs_on"], []).append(centres[op["id"]])
    for name, points in sorted(parts.items()):
        x0 = min(x for x, _ in points) - NODE_W / 2 - 8
        y0 = min(y for _, y in points) - NODE_H / 2 - 8
        x1 = max(x for x, _ in points) + NODE_W / 2 + 8
        y1 = max(y for _, y in points) + NODE_H / 2 + 8
        out.append(
            f'<g class="partition"><rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
            f'fill="none" stroke="#2e7d32" stroke-dasharray="6 3"/>'
            f'<text x="{x0 + 4:.1f}" y="{y0 - 3:.1f}" fill="#2e7d32">{html.escape(name)}</text></g>'
        )
    for edge, points in zip(data["edges"], routes):
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        color = "#c62828" if edge["crosses"] else "#777"
        out.append(f'<polyline class="edge" points="{path}" fill="none" stroke="{color}"/>')
        if edge["crosses"]:
            (xa, ya), (xb, yb) = points[0], points[-1]
            size = "?" if edge["bytes"] is None else _bytes(edge["bytes"])
            out.append(
                f'<text class="crossing" x="{(xa + xb) / 2 + 4:.1f}" y="{(ya + yb) / 2:.1f}" '
                f'fill="#c62828">{html.escape(size)}</text>'
            )
    for op in data["ops"]:
        x, y = centres[op["id"]]
        fill = COLORS["cpu" if op["runs_on"] == "cpu" else "backend"]
        title = op["reason"] or op["runs_on"]
        out.append(
            f'<g class="op" data-runs-on="{html.escape(op["runs_on"])}"><title>{html.escape(op["name"])}: '
            f"{html.escape(title)}</title>"
            f'<rect x="{x - NODE_W / 2:.1f}" y="{y - NODE_H / 2:.1f}" width="{NODE_W}" height="{NODE_H}" rx="4" '
            f'fill="{fill}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{html.escape(op["type"][:22])}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def render_html(data: dict) -> str:
    """One self-contained page: summary, the picture, CPU ops grouped by reason, the profile."""
    s = data["summary"]
    esc = html.escape
    rows = "".join(
        f"<tr><td>{r['count']}</td><td>{esc(r['reason'])}</td><td>{esc(', '.join(r['ops'][:12]))}"
        f"{' …' if len(r['ops']) > 12 else ''}</td></tr>"
        for r in data["reasons"]
    )
    measured = data.get("measured")
    if measured is None:
        profile = "<p>Not measured.</p>"
    elif "skipped" in measured:
        profile = f"<p>Not measured: {esc(measured['skipped'])}</p>"
    else:
        calls = "".join(
            f"<tr><td>{d['pc']}</td><td>{esc(d['runs_on'])}</td><td>{d['ms']:.3f}</td></tr>"
            for d in measured["delegate_calls"]
        )
        errors = "".join(
            f"<tr><td>{esc(k)}</td><td>{v['max_abs']:.3g}</td><td>{v['max_rel']:.3g}</td></tr>"
            for k, v in measured.get("fp16_error", {}).items()
        )
        details = "".join(f"<pre>{esc(t)}</pre>" for t in measured.get("details", []))
        profile = (
            f"<p>One run: {measured['total_ms']:.3f} ms in all, {measured['cpu_kernels_ms']:.3f} ms in CPU "
            f"kernels, {measured['device_kernels_ms']:.3f} ms in device kernels; "
            f"{measured['copies']['copy to device']} bytes to the device and "
            f"{measured['copies']['copy to host']} bytes back.</p>"
            f"<table><tr><th>instruction</th><th>runs on</th><th>ms</th></tr>{calls}</table>"
            + (
                f"<h3>fp16 against fp32</h3><table><tr><th>output</th><th>max abs</th><th>max rel</th></tr>{errors}</table>"
                if errors
                else ""
            )
            + (f"<h3>What each delegate says</h3>{details}" if details else "")
        )
    crossing = sum(e["bytes"] or 0 for e in data["edges"] if e["crosses"])
    embedded = json.dumps(data).replace("</", "<\\/")  # no "</script>" inside the script
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>offload delegation report: {esc(data["model"])}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #bbb;padding:2px 6px;text-align:left;vertical-align:top}}</style></head>
<body><h1>Delegation report: {esc(data["model"])}</h1>
<p>Backends: {esc(", ".join(data["backends"]))}. Delegated ops: {s["delegated_ops"]}/{s["ops"]}
({s["delegated_percent"]:.1f}%) in {s["partitions"]} partition(s); {s["boundary_tensors"]} boundary tensors,
{s["boundary_bytes"]} bytes (edges crossing in the picture: {crossing} bytes per run).</p>
<h2>Graph</h2>
<p>Green: on a delegate (partitions boxed); grey: on the CPU; red edges cross between them.</p>
{render_svg(data)}
<h2>Ops on the CPU, by reason</h2>
<table><tr><th>ops</th><th>reason</th><th>which</th></tr>{rows}</table>
<h2>Measured</h2>
{profile}
<script type="application/json" id="report-data">{embedded}</script>
</body></html>
"""


def to_json(data: dict) -> str:
    return json.dumps(
        data, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else str(x)
    )
