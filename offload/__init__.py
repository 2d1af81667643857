"""offload: run trained neural networks on GPUs through backend delegates.

The public facade: ``load`` a model into an ``ir.Program``, ``optimize`` it with graph passes,
``evaluate`` it on the CPU kernels, ``save`` it as a .pte file that ``offload.runtime.load``
runs; ``to_backend`` hands the parts a backend supports to its delegate; ``calibrate`` records
the ranges values take on sample inputs (what fp16 mixed precision keeps float32 by).
``InferenceSession`` does all of it behind onnxruntime's session calls.
"""

from importlib import metadata as _metadata

from offload import errors
from offload.api import optimize, save, to_backend
from offload.calibrate import calibrate
from offload.frontends import load
from offload.runtime import evaluate
from offload.session import InferenceSession, SessionOptions

__all__ = [
    "InferenceSession",
    "SessionOptions",
    "calibrate",
    "errors",
    "evaluate",
    "load",
    "optimize",
    "save",
    "to_backend",
]
try:  # one place for the version: pyproject.toml, read back from the installed metadata
    __version__ = _metadata.version("offload")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
