"""What the compiled elementwise loops that may write over their input share (numba)."""

from __future__ import annotations

from numba import njit

# An in-place loop computes this many floats into a block of its own before storing them: a loop
# that stores where it loads does not vectorize (numba's arrays may alias, and the compiler's
# check that they do not fails), one that reads the block back does.
_BLOCK = 512


@njit(cache=True, nogil=True, inline="always")
def _same_memory(a, b):  # pragma: no cover - compiled
    """Whether two arrays start at one address (an elementwise op writing over its input)."""
    return a.ctypes.data == b.ctypes.data
