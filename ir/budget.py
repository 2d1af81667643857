"""Memory budgets that know the machine: a documented constant, capped by a share of the
memory the machine (or the process's control group) has and of the address space the process
may use (``RLIMIT_AS``), unless an environment variable sets the budget outright.

A budget bounds what one shape, one window or one package may make before anything is made:
a refusal from a declared shape costs microseconds, while an allocation past what the machine
can give costs seconds of paging and ends in a ``MemoryError`` or the kernel's OOM killer.
The machine is read once, when offload is imported (a limit set later is not seen).
"""

from __future__ import annotations

import contextlib
import os
import resource
from dataclasses import dataclass

from offload.errors import OffloadError

GIB = 1 << 30

# Cgroup memory limits (v2, then v1); "max" or a number near 2^63 means none.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@dataclass(frozen=True)
class Budget:
    """A budget (bytes, or steps of work), where it came from (for error messages) and the variable that sets it."""

    value: int
    source: str
    variable: str

    def explain(self, limit: int) -> str:
        """How ``limit`` was set, for a refusal: this budget's source when ``limit`` is its
        value, and in either case the variable to change."""
        how = self.source if limit == self.value else "as lowered in this process"
        return f"{how}; set {self.variable} to change it"


def physical_memory() -> int | None:
    """Bytes of memory this process's machine has: the smaller of the physical memory and the
    control group's limit (a container's); None where neither can be read."""
    sizes = []
    with contextlib.suppress(ValueError, OSError, AttributeError):  # no sysconf names here
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            sizes.append(int(text))
    sizes = [s for s in sizes if s > 0]
    return min(sizes) if sizes else None


def address_space_limit() -> int | None:
    """The process's address-space limit (soft ``RLIMIT_AS``) in bytes; None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def machine_budget(
    variable: str,
    constant: int,
    share: int,
    *,
    environ=os.environ,
    memory: int | None = -1,
    address_space: int | None = -1,
) -> Budget:
    """``environ[variable]`` when set; otherwise the smallest of ``constant``, 1/``share`` of
    the machine's memory and 1/``share`` of the address-space limit (``memory`` and
    ``address_space`` default to this machine's, None meaning unknown or unlimited)."""
    given = _from_environ(variable, environ)
    if given is not None:
        return given
    memory = physical_memory() if memory == -1 else memory
    address_space = address_space_limit() if address_space == -1 else address_space
    best = Budget(constant, f"offload's default of {_size(constant)}", variable)
    part = _PARTS.get(share, f"1/{share}")
    for total, what in ((memory, "memory"), (address_space, "address-space limit (RLIMIT_AS)")):
        if total is not None and total // share < best.value:
            best = Budget(total // share, f"{part} of the {_size(total)} {what}", variable)
    return best


def fixed_budget(variable: str, constant: int, unit: str = "bytes", *, environ=os.environ) -> Budget:
    """``environ[variable]`` when set, ``constant`` otherwise: a bound the machine does not
    change (work, counted in ``unit``)."""
    given = _from_environ(variable, environ, unit)
    return (
        given if given is not None else Budget(constant, f"offload's default of {constant} {unit}", variable)
    )


def _from_environ(variable: str, environ, unit: str = "bytes") -> Budget | None:
    text = environ.get(variable)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise OffloadError(f"{variable}={text!r} is not a number of {unit} (an integer >= 0)")
    return Budget(value, f"{variable}={value}", variable)


_PARTS = {2: "half", 4: "a quarter"}


def _size(n: int) -> str:
    return f"{n / GIB:.4g} GiB" if n >= GIB else f"{n} bytes"


# Any one tensor a shape makes (type inference, the CPU kernels, a conv's or pool's padded
# input): a quarter of memory, so that an op's input, its padded copy and its result fit together.
TENSOR = machine_budget("OFFLOAD_MAX_TENSOR_BYTES", 16 * GIB, 4)
# Everything read from one nnpackage (zip or folder), held in memory while it imports: half.
PACKAGE = machine_budget("OFFLOAD_MAX_PACKAGE_BYTES", 8 * GIB, 2)
# The arenas one run of a .pte plan uses (non_const_buffer_sizes), allocated when the plan loads
# and again for each run that finds every set in use: half, beside the mapped file and the kernels'
# own results.
ARENAS = machine_budget("OFFLOAD_MAX_ARENA_BYTES", 64 * GIB, 2)
# The element steps one pool may take (window taps times outputs, plus a numpy call's own cost
# per tap; ir/window_cost.py): a pool's window is an attribute alone, so a file can ask for hours
# of work over a small input. About 5-10 s of numpy on the 2-core test machine.
WINDOW_WORK = fixed_budget("OFFLOAD_MAX_WINDOW_WORK", 1 << 34, "element steps")
