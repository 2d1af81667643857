"""The fp16 guard of the GPU backends: a half-precision plan's outputs checked at each run.

Under ``precision=fp16`` every float32 value is stored as half, whose largest finite value is
65,504: an activation past it becomes inf, and what follows inf - inf or 0 * inf NaN. With
compile spec ``fp16_check=1`` a handle scans its float outputs after each run (on the host, where
they are copied anyway); on an inf or NaN it runs the same inputs through a float32 plan of the
same partition (built on first need, kept) and returns that result, warning once per handle. A
float32 plan that gives inf or NaN too is then the answer, as it would be without fp16.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..backend import CompileSpec, CompileSpecError

FP16_CHECK_SPEC = (
    "0 (default) | 1: under precision=fp16, check the outputs for inf/NaN at each run and run that "
    "call again in float32 on a hit (warned once)"
)


def fp16_check(specs: list[CompileSpec], backend: str) -> bool:
    """The ``fp16_check`` spec (False when absent); CompileSpecError for a value other than 0/1."""
    found = False
    for spec in specs:
        if spec.key == "fp16_check":
            text = spec.text()
            if text not in ("0", "1"):
                raise CompileSpecError(f"{backend} backend: fp16_check={text!r}, takes 0 or 1")
            found = text == "1"
    return found


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
