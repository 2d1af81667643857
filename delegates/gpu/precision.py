"""The fp16 guard of the GPU backends: a half-precision plan's outputs checked at each run.

Under ``precision=fp16`` every float32 value is stored as half, whose largest finite value is
65,504: an activation past it becomes inf, and what follows inf - inf or 0 * inf NaN. With
compile spec ``fp16_check=1`` a handle scans its float outputs after each run (on the host, where
they are copied anyway); on an inf or NaN it runs the same inputs through a float32 plan of the
same partition (built on first need, kept) and returns that result, warning once per handle. A
float32 plan that gives inf or NaN too is then the answer, as it would be without fp16.
"""

from __future__ import annotations

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


def without(specs: list[CompileSpec], *keys: str) -> list[CompileSpec]:
    return [s for s in specs if s.key not in keys]


def warning(backend: str) -> str:
    return (
        f"{backend} backend: the fp16 plan's outputs hold inf or NaN (a value past half's range); "
        "this call, and every later one that overflows, runs again in float32 (fp16_check=1)"
    )
