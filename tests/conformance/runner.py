"""Runs one ONNX backend case through offload and says why it fails (None when it passes)."""

from __future__ import annotations

import os
import warnings

import numpy as np

import offload

from .cases import EXPANDED_FP16_ULPS, Case, assert_similar

EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "expected_failures.txt")


def case_id(case: Case) -> str:
    return f"{case.kind}/{case.name}"


# Where the last case of each path really ran: "cpu", "opencl device", "cuda device", or
# "cpu fallback, no cuda device" where the cuda path's delegates ran their CPU fallback. The
# summary (tests/conftest.py) tallies by it, so that no fallback passes for a device.
RAN_ON: dict[str, str] = {}


def _evaluate(program):
    RAN_ON["evaluate"] = "cpu"
    return lambda inputs: offload.evaluate(program, inputs)


def _through_pte(program, reference=None):
    """Run through save → runtime.load, and insist on evaluate's results bit for bit."""
    reference = program if reference is None else reference
    data = offload.save(program)
    assert data[4:8] == b"ET12" and data[8:12] == b"eh00", "a written .pte lacks its identifier or header"
    module = offload.runtime.load(data)
    # A delegate here runs on its backend (the example plugin is installed and available).
    for name in module.method_names:
        for d in module.method(name).delegates:
            assert d.runs_on == "backend", f"delegate for '{d.backend}' fell back to the CPU: {d.reason}"

    def run(inputs):
        got = module.run(inputs)
        want = offload.evaluate(reference, inputs)
        for (name, a), b in zip(got.items(), want.values()):
            _assert_identical(a, b, f"output '{name}' through .pte vs evaluate")
        return got

    return run


def _assert_identical(a, b, where: str) -> None:
    if isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), f"{where}: sequences differ"
        for k, (x, y) in enumerate(zip(a, b)):
            _assert_identical(x, y, f"{where}[{k}]")
        return
    if b is None:
        assert a is None, f"{where}: expected an empty optional"
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if a.dtype == object:
        assert a.tolist() == b.tolist(), f"{where}: strings differ"
    else:
        assert a.tobytes() == b.tobytes(), f"{where}: values differ"


def _delegated(program):
    """Lower every op the example plugin backend takes (through its entry point), then run as .pte.

    No graph passes run first: this path holds delegation itself to evaluate's results bit for bit.
    """
    RAN_ON["delegated"] = "example plugin backend (on the cpu)"
    return _through_pte(offload.to_backend(program, "example", passes="none"), reference=program)


# Cases whose program the opencl path lowered whole (every op in delegates), by case id.
FULLY_DELEGATED: set[str] = set()


def _opencl(program, case_key: str = ""):
    """Lower every op the `opencl` backend claims, then run as .pte on the OpenCL device.

    Its results are held to the case's expected data and tolerances only (float kernels are not
    bit-equal to numpy); every delegate must really run on the device. The default graph passes
    run first, as for any user of to_backend.
    """
    RAN_ON["opencl"] = "opencl device"
    lowered = offload.to_backend(program, "opencl")
    ops = lowered.main.body.operations
    if ops and all(op.op_type == "Delegate" for op in ops):
        FULLY_DELEGATED.add(case_key)
    module = offload.runtime.load(offload.save(lowered))
    for name in module.method_names:
        for d in module.method(name).delegates:
            assert d.runs_on == "backend", f"delegate for '{d.backend}' fell back to the CPU: {d.reason}"
    return module.run


def _cuda(program):
    """Lower every op the `cuda` backend claims, save, load and run.

    The default graph passes run first. Without a CUDA device each delegate must carry id `cuda`
    and run its CPU fallback, bit for bit what evaluate gives on the optimized program (the
    fallbacks are its ops); on a GPU machine the delegates run on the device and are held to the
    case's expected data like the opencl path.
    """
    lowered = offload.to_backend(program, "cuda")
    optimized = offload.optimize(program)
    module = offload.runtime.load(offload.save(lowered))
    infos = [d for name in module.method_names for d in module.method(name).delegates]
    assert all(d.backend == "cuda" for d in infos), infos
    if infos and all(d.runs_on == "backend" for d in infos):
        RAN_ON["cuda"] = "cuda device"
        return module.run
    assert all(d.runs_on == "cpu fallback" for d in infos), infos
    RAN_ON["cuda"] = "cpu fallback, no cuda device" if infos else "cpu, no op delegated"

    def run(inputs):
        got = module.run(inputs)
        for (name, a), b in zip(got.items(), offload.evaluate(optimized, inputs).values()):
            _assert_identical(a, b, f"output '{name}' through the cuda fallback vs evaluate")
        return got

    return run


# How a case's program is run: by the evaluator, saved as .pte and run by the runtime,
# partitioned onto the example plugin backend first (which must not change a bit either),
# lowered to the real `opencl` backend (PoCL here), or lowered to `cuda` (its CPU fallback here).
PATHS = {
    "evaluate": _evaluate,
    "pte": _through_pte,
    "delegated": _delegated,
    "opencl": _opencl,
    "cuda": _cuda,
}


def run_case(case: Case, path: str = "evaluate", prepare=None) -> str | None:
    """None when offload reproduces every output of the case, else a one-line reason."""
    RAN_ON.pop(path, None)
    try:
        program = offload.load(case.model)
        if prepare is not None:
            program = prepare(program)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            run = _opencl(program, case_id(case)) if path == "opencl" else PATHS[path](program)
            RAN_ON.setdefault(path, "cpu")
            for k, (inputs, expected) in enumerate(case.data_sets):
                outs = list(run(inputs).values())
                if len(outs) != len(expected):
                    return f"{len(outs)} outputs, expected {len(expected)}"
                attention = case.name.startswith("test_attention") and case.name.endswith("_expanded")
                ulps = EXPANDED_FP16_ULPS if attention else 0
                for i, (ref, out) in enumerate(zip(expected, outs)):
                    assert_similar(ref, out, case.rtol, case.atol, f"data set {k} output {i}", ulps)
    except AssertionError as e:
        return "wrong result: " + " ".join(str(e).split())[:300]
    except offload.errors.OffloadError as e:
        return f"{type(e).__name__}: " + " ".join(str(e).split())[:300]
    except Exception as e:  # a crash is a failure with its own reason, not a test error
        return f"crash {type(e).__name__}: " + " ".join(str(e).split())[:300]
    return None


def load_expected_failures(path: str = EXPECTED_FAILURES) -> dict[str, str]:
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, reason = line.partition("  # ")
                out[key.strip()] = reason.strip()
    return out
