"""``RunOptions``: a deadline and a stop flag for one run of a Method (as onnxruntime's RunOptions).

The executor checks them before every instruction of a plan, so also inside the sub-plans of If,
Loop and Scan bodies (each iteration runs its body's instructions) and before and after each
delegate call. A delegate's backend sees them too (``delegates.backend.run_options``): the GPU
backends check them at each iteration of a Loop they run on the device; other launches are one
unit, and a run stops at the next check after the delegate returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from offload.errors import RunTerminated


@dataclass
class RunOptions:
    """``timeout``: seconds the run may take (None: no deadline). ``terminate``: set it to True
    from another thread to stop the run at its next check (``RunTerminated``)."""

    timeout: float | None = None
    terminate: bool = False
    deadline: float | None = field(default=None, init=False, repr=False)

    def start(self) -> RunOptions:
        """Arm the deadline (the run calls this as it starts)."""
        if self.timeout is not None:
            if not self.timeout > 0:
                raise ValueError(
                    f"RunOptions.timeout must be a positive number of seconds, got {self.timeout!r}"
                )
            self.deadline = time.monotonic() + self.timeout
        return self

    def check(self, where: str) -> None:
        if self.terminate:
            raise RunTerminated(f"{where}: the run was terminated (RunOptions.terminate)")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise RunTerminated(f"{where}: the run passed its {self.timeout} s deadline (RunOptions.timeout)")
