"""The exceptions offload raises for anything a user can cause."""


class OffloadError(Exception):
    """Base of every error offload raises on purpose."""


class ModelFormatError(OffloadError):
    """A model or .pte file is malformed, truncated, or not what its name says."""


class UnsupportedOpError(OffloadError):
    """An operator (or one of its attribute values) has no implementation here."""


class ShapeError(OffloadError):
    """A tensor's shape does not fit what an operator or a model input declares."""


class DTypeError(OffloadError):
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
