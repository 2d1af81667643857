"""Specializing a GPU plan to the inputs it meets: input signatures, and a bounded cache of plans.

A plan whose shapes hold symbols (``N``, ``seq``) or unknown dims cannot place buffers or size
launches until it sees its inputs. Its runtime keys each run by the *signature* of its inputs (every
input's shape, and the values of the host inputs, the small tensors its shapes are computed from)
and keeps one specialization (launches recorded, buffers placed, arguments bound) per signature in
an LRU cache of at most ``max_shapes`` entries. A static plan has one signature, built at init.

Building a specialization reruns the launchers, which ask for the same kernel sources as before
(sizes are kernel arguments), so a new shape costs shape inference, buffer placement and argument
binding, not kernel builds; weights are uploaded once per handle and shared by every
specialization.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from offload import profile
from offload.errors import DTypeError, ShapeError

from ..backend import CompileSpec, CompileSpecError, DeviceTensor
from .precision import describe_precision

DEFAULT_MAX_SHAPES = 8
MAX_SHAPES_SPEC = f"input-shape signatures kept specialized per delegate (LRU; default {DEFAULT_MAX_SHAPES})"
SHAPES_SPEC = (
    "JSON list of input-shape sets to specialize at init, each {model input name: [dims]} "
    "(to_backend restates each set per partition by shape inference; a set that leaves a "
    "partition's input shapes unknown is skipped there)"
)


def max_shapes(specs: list[CompileSpec], backend: str) -> int:
    """The ``max_shapes`` spec (default ``DEFAULT_MAX_SHAPES``); CompileSpecError below 1."""
    found = next((s.integer() for s in specs if s.key == "max_shapes"), DEFAULT_MAX_SHAPES)
    if found < 1:
        raise CompileSpecError(f"{backend} backend: max_shapes={found}, takes 1 or more")
    return found


def shape_sets(specs: list[CompileSpec], backend: str) -> list[dict[str, tuple[int, ...]]]:
    """The ``shapes`` spec as a list of {input name: shape}; CompileSpecError when malformed."""
    spec = next((s for s in specs if s.key == "shapes"), None)
    if spec is None:
        return []
    try:
        sets = json.loads(spec.text())
    except (ValueError, RecursionError) as e:
        raise CompileSpecError(f"{backend} backend: shapes is not JSON: {e}") from None
    ok = isinstance(sets, list) and all(
        isinstance(s, dict)
        and all(
            isinstance(n, str) and isinstance(d, list) and all(type(x) is int and x >= 0 for x in d)
            for n, d in s.items()
        )
        for s in sets
    )
    if not ok:
        raise CompileSpecError(
            f"{backend} backend: shapes must be a list of {{input name: [dims]}}, got {spec.text()!r}"
        )
    return [{n: tuple(d) for n, d in s.items()} for s in sets]


def planned_shapes(plan: dict, specs: list[CompileSpec], backend: str) -> list[tuple]:
    """The signatures to specialize at init: a static plan's own, and each ``shapes`` set that
    names every input of this plan (a plan with host inputs waits for their values)."""
    if plan["host_inputs"]:
        return []
    found = []
    if all(
        s is not None and all(type(d) is int for d in s)
        for s in (plan["shapes"][str(i)] for i in plan["inputs"])
    ):
        found.append(tuple(tuple(plan["shapes"][str(i)]) for i in plan["inputs"]))
    names = plan.get("names") or []
    for s in shape_sets(specs, backend):
        if len(names) == len(plan["inputs"]) and all(n in s for n in names):
            shapes = tuple(s[n] for n in names)
            input_shapes(plan, list(shapes), backend)  # a set that contradicts the plan: ShapeError
            if shapes not in found:
                found.append(shapes)
    return found


def input_shapes(plan: dict, inputs: list, backend: str) -> dict[int, tuple[int, ...]]:
    """Each plan input's concrete shape from ``inputs`` (arrays, or shapes), checked against the
    plan: dtype, rank, static dims, and one size per symbol across all inputs (an input whose
    rank the plan does not know takes any shape)."""
    if len(inputs) != len(plan["inputs"]):
        raise ShapeError(f"{backend} backend: expected {len(plan['inputs'])} inputs, got {len(inputs)}")
    bound: dict[str, int] = {}
    out = {}
    for i, x in zip(plan["inputs"], inputs):
        shape = tuple(x) if isinstance(x, tuple) else np.shape(x)
        want = plan["shapes"][str(i)]
        dtype = np.dtype(plan.get("dtypes", {}).get(str(i), "float32"))
        if not isinstance(x, tuple) and np.asarray(x).dtype != dtype:
            raise DTypeError(f"{backend} backend: input {i} is {np.asarray(x).dtype}, expected {dtype}")
        if want is None:
            want = [None] * len(shape)
        ok = len(shape) == len(want)
        for d, s in zip(want, shape) if ok else ():
            if type(d) is int:
                ok = ok and d == s
            elif isinstance(d, str):
                ok = ok and bound.setdefault(d, s) == s
        if not ok:
            raise ShapeError(
                f"{backend} backend: input {i} has shape {list(shape)}, expected {_text(want)}"
                + (f" with {', '.join(f'{k}={v}' for k, v in bound.items())}" if bound else "")
            )
        out[i] = tuple(int(s) for s in shape)
    return out


def _text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def signature(plan: dict, inputs: list) -> tuple:
    """The specialization key of ``inputs``: every input's shape, then the host inputs' values."""
    shapes = tuple(np.shape(x) for x in inputs)
    if not plan["host_inputs"]:
        return shapes
    index = {v: k for k, v in enumerate(plan["inputs"])}
    values = tuple(np.asarray(inputs[index[v]]).tobytes() for v in plan["host_inputs"])
    return shapes + values


def resident_inputs(plan: dict, inputs: list, own: type, device) -> list:
    """``execute_device``'s inputs for a handle on ``device``: its backend's device tensors
    (class ``own``) on that device as they are, any other device tensor copied to the host, and
    host inputs (read on the host, their values pick the specialization) on the host."""
    out = [
        x
        if isinstance(x, own) and x.device is device
        else np.asarray(x.to_host() if isinstance(x, DeviceTensor) else x)
        for x in inputs
    ]
    index = {v: k for k, v in enumerate(plan["inputs"])}
    for v in plan["host_inputs"]:
        if isinstance(out[index[v]], own):
            out[index[v]] = out[index[v]].to_host()
    return out


def host_values(plan: dict, inputs: list) -> dict[int, np.ndarray]:
    """The host inputs' values (copies), by value id."""
    index = {v: k for k, v in enumerate(plan["inputs"])}
    return {v: np.array(inputs[index[v]]) for v in plan["host_inputs"]}


def describe(plan: dict, cache: Specializations) -> str:
    """What a handle does with input shapes, and what a new one costs, then how it stores float32
    values (`offload inspect`; several lines)."""
    precision = "".join(f"\n{line}" for line in describe_precision(plan))
    dims = sorted(
        {
            d
            for i in plan["inputs"]
            for d in (["rank?"] if plan["shapes"][str(i)] is None else plan["shapes"][str(i)])
            if type(d) is not int
        },
        key=str,
    )
    stats = cache.stats
    if not dims and not plan["host_inputs"]:
        return f"static shapes: planned at init in {stats.seconds * 1e3:.0f} ms{precision}"
    said = ", ".join("?" if d is None else d for d in dims)
    host = f"; {len(plan['host_inputs'])} input(s) read on the host" if plan["host_inputs"] else ""
    return (
        f"symbolic dims {said or '-'}{host}: specialized per input signature "
        f"({len(cache.entries)} kept of at most {cache.limit}); a new signature costs shape inference, "
        f"launch recording and buffer placement for {len(plan['ops'])} steps "
        f"(about 1-2 ms per step here; kernels are reused){precision}"
    )


@dataclass
class Stats:
    """What specializing cost a handle: counts, and the seconds spent building specializations."""

    built: int = 0
    hits: int = 0
    evicted: int = 0
    seconds: float = 0.0
    last_seconds: float = 0.0


@dataclass
class Specializations:
    """A handle's specialized plans by signature, least recently used first; ``release`` frees an
    evicted one's device memory. Not locked: its handle runs one call at a time."""

    limit: int
    release: Callable[[object], None]
    entries: OrderedDict = field(default_factory=OrderedDict)
    stats: Stats = field(default_factory=Stats)

    def get(self, key: tuple, build: Callable[[], object]) -> object:
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
            self.stats.hits += 1
            return found
        start = time.perf_counter()
        started = profile.now()
        found = build()
        self.stats.last_seconds = time.perf_counter() - start
        run = profile.active()
        if run is not None:  # a profiled run: the specialization is an event of its own
            run.add("specialize", "specialize", started, profile.now(), signature=repr(key)[:200])
        self.stats.seconds += self.stats.last_seconds
        self.stats.built += 1
        self.entries[key] = found
        while len(self.entries) > self.limit:
            _, old = self.entries.popitem(last=False)
            self.stats.evicted += 1
            self.release(old)
        return found

    def clear(self) -> None:
        while self.entries:
            self.release(self.entries.popitem()[1])
