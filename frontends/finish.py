"""What every importer does last: infer the program's types, verify it, and turn what fails into a
``ModelFormatError`` naming the file."""

from __future__ import annotations

from collections.abc import Callable

from offload.errors import ModelFormatError, OffloadError, ShapeError, UnsupportedOpError, VerificationError
from offload.ir import Program, infer_types, verify


def typed_and_verified(
    program: Program, origin: str, items: str | None, fix: Callable[[Program, str], None] | None = None
) -> Program:
    """``program`` with its types inferred and verified. ``fix(program, origin)`` runs between the
    two (what a reference runtime accepts in a slightly malformed file). ``items`` names what the
    format calls its nodes, for the ModelFormatError when they do not fit what they read; None
    keeps such an error's own type, the file named in front, and so does a ShapeError whatever
    ``items`` (inference raises one only for a shape past a budget, ir/budget.py)."""
    try:
        infer_types(program)
        if fix is not None:
            fix(program, origin)
        verify(program)
    except VerificationError as e:
        raise ModelFormatError(f"{origin}: {e}") from None
    except OffloadError as e:
        if isinstance(e, (ModelFormatError, UnsupportedOpError)):
            raise
        if items is None or isinstance(e, ShapeError):  # a shape past a budget: not a format error
            raise type(e)(f"{origin}: {e}") from None
        raise ModelFormatError(f"{origin}: the {items} do not fit the values they read: {e}") from None
    return program
