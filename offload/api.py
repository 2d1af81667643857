"""``save``: an IR program as the bytes of a .pte file (ExecuTorch's format, see docs/pte.md)."""

from __future__ import annotations

import os

from offload.emit import lower
from offload.files import replace_file
from offload.ir import Program
from offload.schemas import pte


def save(program: Program, path: str | os.PathLike | None = None) -> bytes | None:
    """Lower ``program`` and serialize it: written to ``path`` when given, else returned as bytes.

    The file is written whole and renamed over ``path`` (``offload.files.replace_file``): a module
    that maps the old file (``runtime.load(path)``) keeps running on the old bytes."""
    program_t, segments = lower(program)
    data = pte.serialize(program_t, segments)
    if path is None:
        return data
    replace_file(path, data)
    return None


def to_backend(program: Program, backend, compile_specs=None, passes="default", calibration=None) -> Program:
    """A copy of ``program`` whose supported parts run on backend delegates (see docs/pte.md).

    ``backend`` is a backend name, a list of names in priority order, or a ``Partitioner``.
    ``compile_specs`` maps a backend name to a list of ``CompileSpec`` or to a dict of
    key → value. ``passes`` is what ``optimize`` runs first: ``"default"`` (the default
    pipeline), ``"none"`` (partition the program as it is) or a list of pass names. Each
    partition becomes one ``offload::Delegate`` op whose fallback block is the partition
    itself, so the CPU fallbacks run the optimized ops; the input program is left unchanged.

    When a backend is asked for ``precision=fp16``, every float value gets a range first (what
    mixed precision keeps float32 by): the extremes seen on ``calibration`` samples (dicts of
    input name → array; ``offload.calibrate``) run through the optimized program, and bounds
    proven by interval arithmetic for the rest (``offload.ir.ranges``). With samples, each fp16
    delegate's error against its float32 fallback on them is measured and kept with it.
    """
    from offload.ir import verify
    from offload.partitioner import Partitioner
    from offload.partitioner.lowering import lower_partitions, normalize_specs

    partitioner = backend if isinstance(backend, Partitioner) else Partitioner(_as_list(backend))
    specs = normalize_specs(compile_specs, partitioner)
    program = as_float_for(program, partitioner)
    lowered = optimize(program, passes)  # a copy, also for passes="none"
    samples = list(calibration or ())
    if samples or _wants_ranges(specs, partitioner):
        from offload.calibrate import record
        from offload.ir.ranges import annotate

        record(lowered, samples)
        annotate(lowered)
    lower_partitions(lowered, partitioner, specs)
    if samples and _wants_ranges(specs, partitioner):
        from offload.calibrate import measure_fp16_error

        measure_fp16_error(lowered, samples)
    verify(lowered)
    return lowered


def _wants_ranges(specs: dict, partitioner) -> bool:
    """Whether a backend is asked to store values as half (its compile specs say so)."""
    return any(b.stores_half(specs.get(b.name, [])) for b in partitioner.backends)


def as_float_for(program: Program, partitioner) -> Program:
    """``program`` with its quantized activations as float (a copy) when one of the
    partitioner's backends runs quantized models that way (``quantized_as_float``: the GPU
    backends), else ``program`` itself; the CPU path keeps the exact integer ops."""
    from offload.ir.clone import clone_program
    from offload.passes.quantization.integer_as_float import integer_as_float

    if not any(getattr(b, "quantized_as_float", False) for b in partitioner.backends):
        return program
    copy = clone_program(program)
    return copy if integer_as_float(copy) else program


def _as_list(backend) -> list:
    return [backend] if isinstance(backend, str) or not isinstance(backend, (list, tuple)) else list(backend)


def optimize(
    program: Program,
    passes="default",
    *,
    fixed_point: bool | None = None,
    verify_each: bool | None = None,
    records: list | None = None,
) -> Program:
    """A copy of ``program`` rewritten by graph passes; the input is left unchanged.

    ``passes`` is ``"default"`` (the default pipeline, run to a fixed point), ``"none"`` (a
    plain copy) or a list of pass names ``group::name`` run in that order (see
    ``offload.passes.known_passes()``; docs/passes.md), once unless ``fixed_point``. An unknown
    name raises ``UnknownPassError`` listing the known ones. ``verify_each`` verifies the
    program after every pass (default: when ``OFFLOAD_VERIFY_PASSES`` is set). ``records``, a
    list, receives one ``PassRecord`` per pass run (what it changed, op counts, time).
    ``quantization::add_fp16_cast`` (not in the default) makes the inside float16;
    ``offload.passes.quantization.add_fp16_cast.output_errors`` reports its error per output.
    """
    from offload.ir import verify
    from offload.ir.clone import clone_program
    from offload.passes import run_passes

    names = _pass_names(passes)
    copy = clone_program(program)
    if names:
        if fixed_point is None:
            fixed_point = passes == "default"
        done = run_passes(copy, names, fixed_point=fixed_point, verify_each=verify_each)
        if records is not None:
            records.extend(done)
        verify(copy)
    return copy


def _pass_names(passes) -> list[str]:
    from offload.errors import OffloadError
    from offload.passes import DEFAULT, resolve

    if isinstance(passes, str):
        if passes == "default":
            return list(DEFAULT)
        if passes == "none":
            return []
        raise OffloadError(f"passes must be 'default', 'none' or a list of pass names, not {passes!r}")
    names = list(passes)
    for name in names:
        resolve(name)  # fails on an unknown name before any work
    return names
