"""The exceptions offload raises for anything a user can cause.

Every one is an ``OffloadError``; catch that to handle them all. Which to expect:

- ``ModelFormatError``: a model or .pte file is malformed, truncated, or not what its name
  says (the loaders, ``offload.load``, ``offload.runtime.load``, ``InferenceSession``).
- ``UnsupportedOpError``: an operator, or one of its attribute values, has no implementation.
- ``ShapeError`` (also a ``ValueError``) and ``DTypeError`` (also a ``TypeError``): a tensor
  does not fit what an operator or a model input declares (wrong, missing or unknown inputs of
  a run; inconsistent shapes in a model), so code that catches numpy's ValueError / TypeError
  for bad arrays catches these too.
- ``VerificationError``: a program breaks an IR invariant (after a pass or a hand edit).
- ``BackendUnavailableError``: a backend was asked for but is unknown, failed to load, or
  cannot run here where that is an error (``strict``); otherwise a warning says so and the
  CPU runs its part. ``CompileSpecError`` (``offload.delegates.backend``) is a bad compile
  spec, a ``BackendUnavailableError``'s sibling under ``OffloadError``.
- ``KernelError``: a kernel failed while running an operator.
- ``SpecializationError``: a backend cannot run a delegate for these shapes; the runtime runs
  that call on the CPU fallback instead (a user sees it only from a backend's own API).
- ``RunTerminated``: a run passed its deadline or was asked to stop (``RunOptions``).

``ModelFixWarning`` (a ``UserWarning``) says that a model file was accepted with a fix. The
command line prints an ``OffloadError`` as one line on stderr and exits with status 2.
"""


class OffloadError(Exception):
    """Base of every error offload raises on purpose."""


class ModelFormatError(OffloadError):
    """A model or .pte file is malformed, truncated, or not what its name says."""


class UnsupportedOpError(OffloadError):
    """An operator (or one of its attribute values) has no implementation here."""


class ShapeError(OffloadError, ValueError):
    """A tensor's shape does not fit what an operator or a model input declares."""


class DTypeError(OffloadError, TypeError):
    """A tensor's element type does not fit what an operator or a model input declares."""


class VerificationError(OffloadError):
    """A program breaks an IR invariant (SSA, order, names, types)."""


class BackendUnavailableError(OffloadError):
    """A backend was asked for but cannot run on this machine."""


class KernelError(OffloadError):
    """A kernel failed while running an operator; names the operator and its inputs."""


class SpecializationError(OffloadError):
    """A backend cannot run a delegate for these input shapes or shape values (e.g. an input past
    its int32 indexing); the runtime runs that call on the delegate's CPU fallback instead."""


class RunTerminated(OffloadError):
    """A run stopped before its end: its deadline passed, or another thread asked it to stop
    (``runtime.RunOptions``). Nothing it computed is returned."""


class ModelFixWarning(UserWarning):
    """A model file accepted with a fix, as the reference runtime accepts it (a declared shape that
    disagrees with inference, a subgraph name that shadows an outer one); the message says what."""
