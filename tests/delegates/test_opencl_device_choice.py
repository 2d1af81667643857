"""Which OpenCL device the `opencl` backend runs on, and what it says when none works.

The default choice prefers PoCL where it builds kernels and falls back to Intel's CPU runtime (from
the ``opencl`` extra) where it does not, as on CPUs newer than PoCL's LLVM. These tests hide PoCL
from the choice by making its build probe fail the way it fails there, and hold the model that
then runs on Intel's runtime to onnxruntime.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from offload import runtime
from offload.cli import main
from offload.delegates.opencl import device, icd
from offload.errors import OffloadError
from tests.delegates.opencl_support import needs_opencl

pytestmark = needs_opencl

ZEN5_FAILURE = "error: unknown target CPU 'generic'"


def _pocl_fails(monkeypatch):
    """Every PoCL device fails its build probe, as PoCL 3.0 does on AMD family 1Ah."""
    for _, _, dev in device.all_devices():
        if device._is_pocl(dev):
            device.build_failure(dev)  # probed for real first, then overridden
            monkeypatch.setitem(device._PROBED, dev.int_ptr, ZEN5_FAILURE)
    monkeypatch.delenv(device.ENV_DEVICE, raising=False)


def _intel_devices():
    return [dev for _, _, dev in device.all_devices() if "Intel(R) OpenCL" in dev.platform.name]


needs_intel = pytest.mark.skipif(
    icd.intel_runtime() is None,
    reason="Intel's CPU OpenCL runtime is not installed (the opencl extra brings it on x86-64 Linux)",
)


@needs_intel
def test_the_extra_registers_intels_runtime_with_the_icd_loader():
    assert _intel_devices(), [device.device_name(d) for _, _, d in device.all_devices()]
    assert "Intel's CPU runtime" in icd.prepare() or "as configured" in icd.prepare()


@needs_intel
def test_without_pocl_the_default_device_is_intels_and_says_why(monkeypatch, capsys):
    _pocl_fails(monkeypatch)
    dev, why = device.choose(None)
    assert dev in _intel_devices()
    assert "the first CPU runtime that builds kernels here" in why and ZEN5_FAILURE in why
    assert main(["backends"]) == 0
    printed = capsys.readouterr().out
    (line,) = [line for line in printed.splitlines() if "[default:" in line and "opencl" not in line[:6]]
    assert "Intel(R) OpenCL" in line and "cannot build kernels" in line


@needs_intel
def test_the_example_runs_strict_on_intels_runtime_and_matches_onnxruntime(
    example_model, tmp_path, monkeypatch, capsys
):
    _pocl_fails(monkeypatch)
    pte = str(tmp_path / "tiny_cnn.pte")
    assert main(["compile", example_model, "--backend", "opencl", "-o", pte]) == 0
    assert "cannot run on this machine" not in capsys.readouterr().out
    module = runtime.load(pte, strict=True)
    (name,) = module.method_names
    assert all(d.runs_on == "backend" for d in module.method(name).delegates)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    session = ort.InferenceSession(example_model, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    (want,) = session.run(None, feed)
    (got,) = module.run(feed).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    module.close()


def test_a_named_device_and_the_environment_variable_pick_one(monkeypatch):
    (p, d, first), *_ = device.all_devices()
    assert device.choose(f"{p}:{d}")[0] == first
    monkeypatch.setenv(device.ENV_DEVICE, f"{p}:{d}")
    dev, why = device.choose(None)
    assert dev == first and device.ENV_DEVICE in why
    monkeypatch.setenv(device.ENV_DEVICE, "no-such-device")
    with pytest.raises(OffloadError, match="no device matches OFFLOAD_OPENCL_DEVICE='no-such-device'"):
        device.choose(None)


def test_no_working_device_is_said_before_the_tables_and_in_the_run_summary(
    example_model, tmp_path, monkeypatch, capsys
):
    for _, _, dev in device.all_devices():
        device.build_failure(dev)
        monkeypatch.setitem(device._PROBED, dev.int_ptr, ZEN5_FAILURE)
    monkeypatch.delenv(device.ENV_DEVICE, raising=False)
    pte = str(tmp_path / "tiny_cnn.pte")
    assert main(["inspect", example_model, "--backend", "opencl"]) == 0
    printed = capsys.readouterr().out
    first = printed.splitlines()[0]
    assert first.startswith("opencl cannot run on this machine: no OpenCL device here builds kernels")
    assert ZEN5_FAILURE in first
    assert main(["compile", example_model, "--backend", "opencl", "-o", pte]) == 0
    assert capsys.readouterr().out.startswith("opencl cannot run on this machine:")
    assert main(["run", pte]) == 0
    printed = capsys.readouterr()
    assert "backend 'opencl' cannot run here" in printed.err
    summary = printed.out.splitlines()[-1]
    assert "with delegates on the CPU: opencl (cpu fallback) x" in summary
    assert summary.endswith("opencl cannot run here")


def test_a_user_set_vendors_folder_is_left_alone(tmp_path):
    """OCL_ICD_VENDORS set by the user: offload adds no runtime of its own (a fresh process, as
    the ICD loader reads the variable once)."""
    env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path)}
    code = (
        "import os; from offload.delegates.opencl import device, icd; device.all_devices(); "
        "print(icd.prepare()); print(os.environ['OCL_ICD_VENDORS'])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    note, folder = out.stdout.splitlines()
    assert note.startswith("ICD loader as configured") and folder == str(tmp_path)


def test_the_vendors_folder_names_the_installed_library(tmp_path, monkeypatch):
    library = tmp_path / "lib" / "libintelocl.so"
    library.parent.mkdir()
    library.write_bytes(b"")
    monkeypatch.setattr(icd, "intel_runtime", lambda: library)
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    note = icd._prepare()
    folder = os.environ["OCL_ICD_VENDORS"]  # monkeypatch puts the process's own back afterwards
    assert "Intel's CPU runtime" in note and folder.startswith(str(tmp_path / "cache"))
    icds = {p.name: p.read_text().strip() for p in Path(folder).glob("*.icd")}
    assert icds["offload-intel-cpu.icd"] == str(library)
    system = {p.name for p in icd.SYSTEM_VENDORS.glob("*.icd")} if icd.SYSTEM_VENDORS.is_dir() else set()
    assert system <= set(icds)
