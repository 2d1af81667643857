"""What every loader harness enforces on one input: the loader either succeeds or raises an
``offload.errors.OffloadError``, and whatever it loads runs, bounded, to an answer or to an
``OffloadError`` as well.

Anything else that escapes ``check_*`` is a finding: a ``KeyError`` or ``IndexError`` from
reading a field that is not there, a ``RecursionError`` from a nesting the loader did not bound,
a ``MemoryError`` or ``OverflowError`` from a shape the loader did not refuse (a hostile shape
is a user error too: it must be a ``ShapeError``/``ModelFormatError`` before anything is
allocated), a ``ValueError`` from numpy on a mismatched buffer. A hang is a finding as well:
libFuzzer's ``-timeout`` (1 s in the harnesses) reports any input that takes longer.

Inputs are built here, not by the loader under test, so the harness only feeds inputs it can
make cheaply: a method whose declared inputs would take more than ``MAX_INPUT_BYTES`` is loaded
but not run (the loader's own limits are what is tested, not this machine's memory).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import struct
import tempfile
import warnings

import numpy as np

import offload
from offload.errors import OffloadError
from offload.ir import DataType, OptionalType, SequenceType, TensorType
from offload.ir import types as ir_types
from offload.runtime import RunOptions
from offload.runtime.kernels import _util as kernel_util

# The kernels' result limit while a harness runs, lowered to stay under the fuzzers' RSS limit
# (-rss_limit_mb=2048): a larger result is a legitimate ShapeError here, not an OOM finding.
MAX_RESULT_BYTES = 1 << 28
RUN_TIMEOUT = 1.0  # seconds a run may take (RunOptions.timeout)
MAX_INPUT_BYTES = 1 << 22  # larger declared inputs are not built (see the module docstring)
SYMBOLIC_DIM = 2  # the size given to a dimension the file leaves unknown or symbolic


def check_onnx(data: bytes) -> OffloadError | None:
    """Model bytes (ONNX; TFLite and nnpackage zips are sniffed the same way) → ``offload.load``; when it loads, ``offload.save`` → ``runtime.load`` → a bounded
    run. Returns the OffloadError that stopped it (None: it ran, or its inputs were not built)."""
    with _harness_settings():
        try:
            program = offload.load(bytes(data))
            pte = offload.save(program)
        except OffloadError as e:
            return e
        return _load_and_run(pte, data)


def check_coreml(data: bytes) -> OffloadError | None:
    """A Core ML package packed by ``pack_coreml`` (Manifest.json, the model file, weight.bin) →
    written as an .mlpackage folder → ``offload.load`` → as ``check_onnx``."""
    with _harness_settings():
        path = _write_package(unpack_coreml(bytes(data)))
        try:
            program = offload.load(path)
            pte = offload.save(program)
        except OffloadError as e:
            return e
        return _load_and_run(pte, data)


def pack_coreml(manifest: bytes, model: bytes, weights: bytes) -> bytes:
    """One fuzz input holding a package's three files: two u32 lengths, then the files."""
    return struct.pack("<II", len(manifest), len(model)) + manifest + model + weights


def unpack_coreml(data: bytes) -> tuple[bytes, bytes, bytes]:
    """The three files of ``pack_coreml``'s input; lengths past the end are cut, so every input
    is a package (with empty or short files) rather than a harness error."""
    head = data[:8].ljust(8, b"\0")
    a, b = struct.unpack("<II", head)
    body = data[8:]
    a = min(a, len(body))
    b = min(b, len(body) - a)
    return body[:a], body[a : a + b], body[a + b :]


_PACKAGE_ROOT: list[str] = []


def _write_package(files: tuple[bytes, bytes, bytes]) -> str:
    """The files into this process's package folder (each replaced, not rewritten in place: a
    mapping of the previous weight file stays valid)."""
    if not _PACKAGE_ROOT:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _PACKAGE_ROOT.append(os.path.join(tempfile.mkdtemp(prefix="offload-fuzz-", dir=base), "m.mlpackage"))
    root = _PACKAGE_ROOT[0]
    weights = os.path.join(root, "Data", "com.apple.CoreML", "weights")
    os.makedirs(weights, exist_ok=True)
    for rel, content in zip(
        ("Manifest.json", "Data/com.apple.CoreML/model.mlmodel", "Data/com.apple.CoreML/weights/weight.bin"),
        files,
    ):
        path = os.path.join(root, rel)
        with open(path + ".new", "wb") as f:
            f.write(content)
        os.replace(path + ".new", path)
    return root


def check_pte(data: bytes) -> OffloadError | None:
    """.pte bytes → ``offload.runtime.load`` → a bounded run; returns as ``check_onnx`` does."""
    with _harness_settings():
        return _load_and_run(bytes(data), data)


@contextlib.contextmanager
def _harness_settings():
    """Warnings off and the kernels' result limit lowered, for one input; restored after it."""
    saved = kernel_util.MAX_RESULT_BYTES, ir_types.MAX_TENSOR_BYTES
    kernel_util.MAX_RESULT_BYTES = ir_types.MAX_TENSOR_BYTES = MAX_RESULT_BYTES
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        kernel_util.MAX_RESULT_BYTES, ir_types.MAX_TENSOR_BYTES = saved


def _load_and_run(pte: bytes, data: bytes) -> OffloadError | None:
    try:
        module = offload.runtime.load(pte)
    except OffloadError as e:
        return e
    try:
        if not module.method_names:
            return None
        method = module.method(module.method_names[0])
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(data).digest()[:8], "little"))
        inputs = random_inputs(method.inputs, rng)
        if inputs is not None:
            kernel_util.compiled_loops()  # importing numba once is no part of a run's time
            method.run(inputs, RunOptions(timeout=RUN_TIMEOUT))
        return None
    except OffloadError as e:
        return e
    finally:
        with contextlib.suppress(OffloadError):  # a backend refusing to let go is allowed too
            module.close()


def random_inputs(ports, rng: np.random.Generator) -> dict | None:
    """One random value per declared input, of its declared dtype and shape; None when they
    would take more than MAX_INPUT_BYTES (or a declared type has no value to make)."""
    out, total = {}, 0
    for port in ports:
        value = _random_value(port.type, rng)
        if value is _TOO_BIG:
            return None
        total += value.nbytes if isinstance(value, np.ndarray) else 0
        if total > MAX_INPUT_BYTES:
            return None
        out[port.name] = value
    return out


_TOO_BIG = object()


def _random_value(t, rng: np.random.Generator):
    if isinstance(t, SequenceType):
        return []
    if isinstance(t, OptionalType):
        return None
    if not isinstance(t, TensorType):
        return None
    shape = tuple(d if isinstance(d, int) else SYMBOLIC_DIM for d in (t.shape or ()))
    try:
        dtype = t.dtype.numpy
    except OffloadError:
        return _TOO_BIG  # an element type with no numpy form: nothing a caller could pass
    n = math.prod(shape)
    if n * max(dtype.itemsize, 1) > MAX_INPUT_BYTES:
        return _TOO_BIG
    if t.dtype == DataType.STRING:
        return np.full(shape, "a", dtype=object)
    if t.dtype == DataType.BOOL:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, 3, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
