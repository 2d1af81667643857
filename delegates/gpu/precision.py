"""fp16 on the GPU backends: which values stay float32 (mixed precision), and the run-time guard.

Under ``precision=fp16`` float32 values are stored as half, whose largest finite value is
65,504: an activation past it becomes inf, and what follows inf - inf or 0 * inf NaN.

**Mixed precision** (compile spec ``mixed``, on by default). At compile time every float32 value
of the partition has a range on its IR type (``offload.ir.ranges``: proven bounds, or ranges
seen on calibration samples, widened by ``OBSERVED_MARGIN``). A value whose range does not fit
half, or has none, is *kept*: stored as float32, with the reason in the plan's "fp32" table.
A step reading or writing a kept value runs on float32 storage ("fp32": 1: its kernels are built
without -DOFFLOAD_FP16) and its float outputs are kept too; every other step runs on half. Where
a value passes from one kind of step to the other, the builder converts it (``convert.cl``) — the
casts the Core ML converter puts around the ops it keeps in fp32. A partition input or weight
read only by float32 steps is stored as float32 from the start. A partition with If/Loop and a
kept value runs wholly on float32 storage (branch and loop results are copied between buffers,
which must then agree).

**The guard** (``fp16_check=1``). A handle scans its float outputs after each run (on the host,
where they are copied anyway); on an inf or NaN it runs the same inputs through a float32 plan
of the same partition (built on first need, kept) and returns that result, warning once per
handle; under a strict load it raises ``KernelError`` instead. A float32 plan that gives inf or NaN too is then the answer, as it would be without fp16.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from offload.errors import KernelError

from ..backend import CompileSpec, CompileSpecError, strict_execution

FP16_CHECK_SPEC = (
    "0 (default) | 1: under precision=fp16, check the outputs for inf/NaN at each run and run that "
    "call again in float32 on a hit (warned once)"
)


MIXED_SPEC = (
    "1 (default) | 0: under precision=fp16, keep float32 the values whose range does not fit half "
    "(0: every float32 value is stored as half)"
)
HALF_MAX = 65504.0  # the largest finite half
OBSERVED_MARGIN = 4.0  # a range seen on samples is widened this much: other inputs go further


def flag_spec(specs: list[CompileSpec], key: str, default: bool, backend: str) -> bool:
    """A 0/1 compile spec (``default`` when absent); CompileSpecError for another value."""
    found = default
    for spec in specs:
        if spec.key == key:
            text = spec.text()
            if text not in ("0", "1"):
                raise CompileSpecError(f"{backend} backend: {key}={text!r}, takes 0 or 1")
            found = text == "1"
    return found


def mixed(specs: list[CompileSpec], backend: str) -> bool:
    """The ``mixed`` spec (True when absent)."""
    return flag_spec(specs, "mixed", True, backend)


def too_wide(bounds) -> str | None:
    """Why a float32 value with these bounds (an ``ir.ValueRange`` or None) cannot be stored as
    half, or None when it can."""
    if bounds is None or not math.isfinite(bounds.magnitude):
        return "range unknown (give input ranges or calibration samples)"
    span = f"[{bounds.lo:.4g}, {bounds.hi:.4g}]"
    if bounds.observed and bounds.magnitude * OBSERVED_MARGIN >= HALF_MAX:
        return f"seen in {span} (×{OBSERVED_MARGIN:g} margin), past half's 65504"
    if not bounds.observed and bounds.magnitude >= HALF_MAX:
        return f"bounded by {span}, past half's 65504"
    return None


def _steps(ops: list[dict]):
    for step in ops:
        yield step
        for sub in [*step.get("branches", []), *([step["body"]] if "body" in step else [])]:
            yield from _steps(sub["ops"])


def keep_fp32(plan: dict, reasons: dict[int, str], names: dict[int, str]) -> None:
    """Mark ``plan`` (precision fp16) for mixed precision: ``reasons`` holds the float32 values
    that cannot be half and why; fills the plan's "fp32" table ("name: why" by value id, the
    names from ``names``) and the steps' "fp32" flags."""
    if not reasons:
        return
    floats = {int(i) for i, t in plan["dtypes"].items() if t == "float32"}
    kept = dict(reasons)
    steps = list(_steps(plan["ops"]))
    if any(step["type"] in ("If", "Loop") for step in steps):
        for step in steps:
            step["fp32"] = 1
        why = "in a partition with If/Loop and a value past half: all of it float32"
        for i in floats:
            kept.setdefault(i, why)
    else:
        readers: dict[int, list[dict]] = {}
        for step in steps:
            for i in step["inputs"]:
                if i is not None:
                    readers.setdefault(i, []).append(step)
        for step in steps:
            if any(i in reasons for i in [*step["inputs"], *step["outputs"]] if i is not None):
                step["fp32"] = 1
                for o in step["outputs"]:
                    if o in floats:
                        kept.setdefault(o, f"written by a float32 step ({step.get('name') or step['type']})")
        for i in [*plan["inputs"], *(int(w) for w in plan["weights"])]:
            if i in floats and readers.get(i) and all(s.get("fp32") for s in readers[i]):
                kept.setdefault(i, "read by float32 steps only")
    plan["fp32"] = {str(i): f"{names.get(i, f'value {i}')}: {why}" for i, why in sorted(kept.items())}


MAX_LISTED = 12  # kept values `offload inspect` names one by one


def describe_precision(plan: dict) -> list[str]:
    """How a plan stores float32 values (`offload inspect`): fp32, all half, or mixed with the
    values kept float32 and why."""
    if plan.get("precision", "fp32") != "fp16":
        return []
    floats = sum(t == "float32" for t in plan["dtypes"].values())
    kept = plan.get("fp32", {})
    if not kept:
        return [f"precision fp16: all {floats} float32 values stored as half"]
    lines = [f"precision fp16 (mixed): {len(kept)} of {floats} float32 values kept float32:"]
    lines += [f"  {why}" for why in list(kept.values())[:MAX_LISTED]]
    if len(kept) > MAX_LISTED:
        lines.append(f"  … and {len(kept) - MAX_LISTED} more")
    return lines


def fp16_check(specs: list[CompileSpec], backend: str) -> bool:
    """The ``fp16_check`` spec (False when absent)."""
    return flag_spec(specs, "fp16_check", False, backend)


def overflowed(outputs: list[np.ndarray]) -> bool:
    """Whether a float output holds inf or NaN."""
    return any(o.dtype.kind == "f" and o.size and not np.isfinite(o).all() for o in outputs)


def as_fp32(plan: dict) -> dict:
    """The same plan with float32 values stored as float32."""
    return {k: v for k, v in plan.items() if k != "precision"}


@dataclass
class Fp32Rerun:
    """A handle's fp16_check: how to make its float32 twin (``make(plan, specs)``, called once,
    on the first overflow) and the twin once made. Both backends keep one on their handles."""

    backend: str
    plan: dict
    specs: list[CompileSpec]
    make: Callable[[dict, list[CompileSpec]], object]
    handle: object = None
    warned: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def wanted(cls, backend: str, plan: dict, specs: list[CompileSpec], make) -> Fp32Rerun | None:
        """One for an fp16 plan compiled with fp16_check=1; None otherwise."""
        if plan.get("precision") != "fp16" or not fp16_check(specs, backend):
            return None
        return cls(
            backend, plan, [s for s in specs if s.key not in ("precision", "fp16_check", "shapes")], make
        )

    def checked(self, outputs: list[np.ndarray], inputs: list[np.ndarray], execute) -> list[np.ndarray]:
        """``outputs``, or when they overflowed, ``execute(twin, inputs)`` (warned once)."""
        if not overflowed(outputs):
            return outputs
        if strict_execution.get():
            raise KernelError(
                f"{self.backend} backend: the fp16 plan's outputs hold inf or NaN (a value past half's "
                "range); a strict run does not rerun it in float32 (fp16_check=1)"
            )
        with self.lock:
            if self.handle is None:
                self.handle = self.make(as_fp32(self.plan), self.specs)
            warn, self.warned = not self.warned, True
        if warn:
            warnings.warn(
                f"{self.backend} backend: the fp16 plan's outputs hold inf or NaN (a value past half's "
                "range); this call, and every later one that overflows, runs again in float32 (fp16_check=1)",
                RuntimeWarning,
                stacklevel=4,
            )
        return execute(self.handle, inputs)
