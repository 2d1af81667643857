"""``InferenceSession``: one model ready to run, through the calls onnxruntime's session answers.

A model file (``.onnx``, ``.tflite``, an nnpackage, ``.mlpackage`` / ``.mlmodel``) is imported,
rewritten by the default graph passes and partitioned for the providers that can run here
(``offload.to_backend``), lowered to a ``.pte`` in memory and loaded; a ``.pte`` file is loaded
as it is. Providers are backend names (``"opencl"``, ``"cuda"``; onnxruntime's
``"CUDAExecutionProvider"`` spelling too) or ``(name, {compile spec: value})`` pairs, in priority
order; the CPU runs whatever no provider takes. A provider that cannot run on this machine is
left out with a warning, as onnxruntime does (``SessionOptions(strict=True)`` makes that an
error); a name no installed backend has is an error.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from offload.errors import BackendUnavailableError, ModelFormatError, OffloadError
from offload.frontends import sniff
from offload.ir.type_text import type_text

CPU = "cpu"
ORT_SUFFIX = "ExecutionProvider"


@dataclass
class SessionOptions:
    """How a session compiles and loads its model.

    ``passes``: what ``offload.optimize`` runs before partitioning (``"default"``, ``"none"`` or a
    list of pass names). ``strict``: a provider that cannot run here is an error, not a warning.
    ``cache_dir``: a folder where compiled models are kept by content hash, providers and options
    (``offload.session_cache``; ``clear_cache(folder)`` empties it); None compiles every time.
    """

    passes: str | list[str] = "default"
    strict: bool = False
    cache_dir: str | os.PathLike | None = None


@dataclass(frozen=True)
class NodeArg:
    """A model input or output as onnxruntime describes it: ``shape`` holds ints, the names of
    symbolic dims, and None for a dim nothing names; ``type`` is ONNX's type string."""

    name: str
    shape: list | None
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    """What the model file says about itself (empty strings where it says nothing)."""

    producer_name: str = ""
    producer_version: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 0
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


def provider_name(name: str) -> str:
    """offload's backend name for a provider name: ``"CUDAExecutionProvider"`` → ``"cuda"``."""
    if not isinstance(name, str):
        raise OffloadError(f"a provider is a name or a (name, options) pair, not {name!r}")
    if name.endswith(ORT_SUFFIX) and len(name) > len(ORT_SUFFIX):
        name = name[: -len(ORT_SUFFIX)]
    return name.lower()


def parse_providers(providers, provider_options=None) -> list[tuple[str, dict]]:
    """(backend name, options) per provider, in priority order, up to the first ``"cpu"``: the
    CPU takes every op, so nothing after it would get any."""
    providers = list(providers or [])
    if provider_options is not None and len(provider_options) != len(providers):
        raise OffloadError(
            f"provider_options has {len(provider_options)} entries for {len(providers)} providers"
        )
    out: list[tuple[str, dict]] = []
    for i, p in enumerate(providers):
        name, options = p if isinstance(p, tuple) and len(p) == 2 else (p, {})
        if not isinstance(options, Mapping):
            raise OffloadError(f"provider {name!r}: options must be a dict, not {type(options).__name__}")
        options = {**options, **(provider_options[i] if provider_options is not None else {})}
        name = provider_name(name)
        if name == CPU:
            if options:
                warnings.warn(
                    f"provider 'cpu' takes no options; {sorted(options)} have no effect", stacklevel=3
                )
            break
        out.append((name, dict(options)))
    return out


def usable_providers(providers: list[tuple[str, dict]], strict: bool) -> list[tuple[str, dict]]:
    """The providers whose backend can run here; each other one is warned about (an error under
    ``strict``). A name that no installed backend has raises BackendUnavailableError."""
    from offload.delegates import registry

    out = []
    for name, options in providers:
        registry.get(name)  # an unknown name fails here, naming the known ones
        available = registry.availability(name)
        if available:
            out.append((name, options))
            continue
        message = f"provider '{name}' cannot run on this machine ({available.reason})"
        if strict:
            raise BackendUnavailableError(message)
        warnings.warn(
            message + "; it is left out (its ops run on the next provider or the CPU)",
            RuntimeWarning,
            stacklevel=3,
        )
    return out


def is_pte(source) -> bool:
    """Whether ``source`` (a path or bytes) is a .pte file, judged by content; a file named
    ``.pte`` that is not one is a ModelFormatError saying so."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return sniff(bytes(source[:8])) == "pte"
    path = os.fspath(source)
    if os.path.isdir(path):  # a model folder: an .mlpackage or an nnpackage
        return False
    if not os.path.isfile(path):
        raise ModelFormatError(f"{path}: no such file")
    with open(path, "rb") as f:
        head = f.read(8)
    if sniff(head) == "pte":
        return True
    if path.lower().endswith(".pte"):
        raise ModelFormatError(
            f"{path}: not a .pte file (no 'ET12' identifier at byte 4); compile a model with "
            "`offload compile MODEL -o OUT.pte`"
        )
    return False


def _node_arg(name: str, t) -> NodeArg:
    shape = getattr(t, "shape", None)
    return NodeArg(name, None if shape is None else list(shape), type_text(t))


class InferenceSession:
    """A model loaded for inference, with onnxruntime's session calls.

    ``path_or_bytes``: a model file or folder, a ``.pte`` file, or the bytes of either (not of
    an ``.mlmodel``, which is told apart by its name). ``providers``: backend names or
    ``(name, {compile spec: value})`` pairs in priority order (``provider_options``, a list of
    dicts beside them, as onnxruntime takes it, is merged in); the CPU comes last implicitly.
    For a ``.pte`` the providers are those it was compiled for.
    """

    def __init__(
        self,
        path_or_bytes,
        sess_options: SessionOptions | None = None,
        providers: Sequence | None = None,
        provider_options: Sequence[dict] | None = None,
    ):
        from offload import runtime

        options = sess_options if sess_options is not None else SessionOptions()
        if not isinstance(options, SessionOptions):
            raise OffloadError(
                f"sess_options must be an offload.SessionOptions, not {type(options).__name__}"
            )
        asked = parse_providers(providers, provider_options)
        if is_pte(path_or_bytes):
            if asked:
                warnings.warn(
                    "a .pte file is already compiled: its delegates run on the backends it was "
                    f"compiled for, not on the providers given ({[n for n, _ in asked]})",
                    stacklevel=2,
                )
            self._module = runtime.load(path_or_bytes, strict=options.strict)
            described = _description(self._first(), None)
        else:
            described = self._compile_and_load(
                path_or_bytes, usable_providers(asked, options.strict), options
            )
        self._method = self._first()
        self._inputs = [NodeArg(*a) for a in described["inputs"]]
        self._outputs = [NodeArg(*a) for a in described["outputs"]]
        self._meta = ModelMetadata(**described["meta"])

    def _first(self):
        return self._module.method(self._module.method_names[0])

    def _compile_and_load(self, source, providers: list[tuple[str, dict]], options: SessionOptions) -> dict:
        """Load the model compiled for ``providers`` (from ``options.cache_dir`` when an entry is
        there, else compiled now and stored there); its description."""
        from offload import runtime, session_cache
        from offload.api import save

        key = None
        if options.cache_dir is not None:
            key = session_cache.cache_key(source, providers, options.passes)
            found = session_cache.lookup(options.cache_dir, key)
            if found is not None:
                self._module = runtime.load(found[0], strict=options.strict)
                return found[1]
        program = _compile(source, providers, options.passes)
        data = save(program)
        self._module = runtime.load(data, strict=options.strict)
        described = _description(self._first(), program)
        if key is not None:
            session_cache.store(options.cache_dir, key, data, described)
        return described

    # ---- description ---------------------------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        """The backends this session's delegates run on, in the order they are first met, then
        ``"cpu"`` (a delegate whose backend cannot run here runs on the CPU)."""
        names = [d.backend for d in self._method.delegates if d.runs_on == "backend"]
        return [*dict.fromkeys(names), CPU]

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    # ---- running -------------------------------------------------------------------------------

    def array_device(self, backend: str):
        """What to make input arrays on so that the delegates of ``backend`` read them in place
        (``runtime.Module.array_device``: a ``pyopencl.CommandQueue`` for opencl, a
        ``cupy.cuda.Device`` for cuda); None when no delegate runs on that backend here."""
        return self._module.array_device(provider_name(backend))

    def run(
        self, output_names, input_feed: Mapping[str, Any], run_options=None, *, output_device: str = "host"
    ) -> list:
        """The outputs named in ``output_names`` (None: all of them), in that order, for the
        inputs in ``input_feed``; ``run_options`` is an ``offload.runtime.RunOptions`` or None.

        Inputs may be numpy arrays, DLPack exporters, or arrays in device memory (a
        ``pyopencl.array.Array``, a CuPy array, a torch CUDA tensor): one that a delegate on the
        same device reads first goes in without a host copy. ``output_device="device"`` returns
        the outputs that delegates compute as arrays on their device (what onnxruntime's
        IOBinding ``bind_output(name, device_type)`` does); outputs computed on the CPU stay numpy."""
        from offload.runtime import RunOptions

        if run_options is not None and not isinstance(run_options, RunOptions):
            raise OffloadError(
                f"run_options must be an offload.runtime.RunOptions, not {type(run_options).__name__}"
            )
        known = [p.name for p in self._method.outputs]
        names = known if output_names is None else list(output_names)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise OffloadError(f"no output named {unknown}; the model's outputs are {known}")
        outputs = self._method.run(input_feed, run_options, output_device=output_device)
        return [outputs[n] for n in names]

    def close(self) -> None:
        """Release what the backends hold."""
        self._module.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _description(method, program) -> dict:
    """The method's inputs and outputs as NodeArg fields, with the symbolic dim names the
    imported ``program`` keeps (a .pte keeps only that a dim is symbolic), and the metadata."""

    def declared(ports, values) -> list[list]:
        types = {v.name: v.type for v in values}
        return [list(astuple(_node_arg(p.name, types.get(p.name, p.type)))) for p in ports]

    meta = dict(program.metadata) if program is not None else {}
    known = {"producer_name", "producer_version", "ir_version", "format"}
    return {
        "inputs": declared(method.inputs, program.main.inputs if program is not None else ()),
        "outputs": declared(method.outputs, program.main.outputs if program is not None else ()),
        "meta": asdict(
            ModelMetadata(
                producer_name=meta.get("producer_name", ""),
                producer_version=meta.get("producer_version", ""),
                graph_name=program.main.body.name if program is not None else method.name,
                custom_metadata_map={k: v for k, v in meta.items() if k not in known},
            )
        ),
    }


def _compile(source, providers: list[tuple[str, dict]], passes):
    """The imported model after ``passes``, its parts for ``providers`` delegated."""
    from offload.api import optimize, to_backend
    from offload.frontends import load

    program = load(source)
    if not providers:
        return optimize(program, passes)
    specs = {name: options for name, options in providers if options}
    return to_backend(program, [name for name, _ in providers], specs, passes=passes)
