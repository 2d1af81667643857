"""How the command line opens a model and checks its paths: a .pte file as it is, or a model file
compiled in memory as ``offload compile`` would compile it."""

from __future__ import annotations

import os

import offload
from offload.errors import OffloadError
from offload.progress import Progress
from offload.session import is_pte


def output_path(path: str, flag: str) -> str:
    """``path`` when a file can be written there; else an OffloadError naming ``flag``, checked
    before any work so that a long compile does not end in a failed write."""
    if os.path.isdir(path):
        raise OffloadError(f"{flag} {path}: is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OffloadError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OffloadError(f"{flag} {path}: the folder {folder} is not writable")
    return path


def input_folder(path: str, flag: str) -> str:
    if not os.path.isdir(path):
        raise OffloadError(
            f"{flag} {path}: " + ("not a folder" if os.path.exists(path) else "no such folder")
        )
    return path


def partitioner(args, backends: list[str] | None = None):
    """The Partitioner the flags describe (for ``backends`` when given, else ``--backend``), or
    None without a backend."""
    if backends is None:
        backends = args.backend
        if not backends and (
            args.deny_op or args.deny_node or getattr(args, "spec", None) or args.min_ops != 1
        ):
            raise OffloadError("--spec, --deny-op, --deny-node and --min-ops need --backend NAME")
    if not backends:
        return None
    from offload.partitioner import Partitioner

    return Partitioner(backends, deny_ops=args.deny_op, deny_nodes=args.deny_node, min_ops=args.min_ops)


def compile_specs(items: list[str]) -> dict[str, dict[str, str]]:
    """``NAME.key=value`` flags → {backend name: {key: value}}."""
    specs: dict[str, dict[str, str]] = {}
    for item in items:
        target, sep, value = item.partition("=")
        name, dot, key = target.partition(".")
        if not sep or not dot or not name or not key:
            raise OffloadError(f"--spec expects NAME.key=value, got '{item}'")
        specs.setdefault(name, {})[key] = value
    return specs


def delegated(program, partitioner, specs=None, calibration=None):
    """``program`` partitioned for ``partitioner`` as it is (the chosen passes already ran)."""
    from offload.api import to_backend

    return to_backend(program, partitioner, specs, passes="none", calibration=calibration)


def open_model(
    path: str,
    progress: Progress,
    strict: bool = False,
    partitioner=None,
    on_import=None,
    prepare=None,
    specs=None,
):
    """(the runtime Module, the compiled program or None for a .pte). A model file is rewritten by
    ``prepare`` and then delegated by ``partitioner`` with ``specs`` when given; ``on_import``
    sees the program before delegation."""
    if is_pte(path):
        if partitioner is not None:
            raise OffloadError(f"{path}: --backend needs a model file; a .pte file is already compiled")
        with progress.step(f"loading {path}"):
            return offload.runtime.load(path, strict=strict), None
    with progress.step(f"importing {path}"):
        program = offload.load(path)
    if prepare is not None:
        program = prepare(program)
    if on_import is not None:
        on_import(program)
    if partitioner is not None:
        with progress.step("delegating to " + ", ".join(b.name for b in partitioner.backends)):
            program = delegated(program, partitioner, specs)
    with progress.step("lowering to .pte"):
        data = offload.save(program)
    with progress.step("loading"):
        return offload.runtime.load(data, strict=strict), program
