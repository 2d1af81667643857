"""Test-wide fixtures and hooks: the bundled example model, the conformance tally."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def example_model(tmp_path_factory) -> str:
    """The bundled example (a small CNN), built by its script as a newcomer would."""
    path = str(tmp_path_factory.mktemp("example") / "tiny_cnn.onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "build_example.py"), path], check=True)
    return path


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_opencl") is not None:
        from tests.delegates.opencl_support import require_opencl

        require_opencl()


def pytest_terminal_summary(terminalreporter):
    from tests.delegates.opencl_support import default_device

    if default_device():
        terminalreporter.write_line(f"opencl tests ran on: {default_device()}")
    try:
        from tests.conformance.test_onnx_backend import TALLY
    except ImportError:
        return
    if not TALLY:
        return
    terminalreporter.section("ONNX conformance")
    for (path, kind, ran_on), (passed, total) in sorted(TALLY.items()):
        if ran_on == "opencl device":  # PoCL is a CPU OpenCL driver: name it
            ran_on = f"opencl device {default_device()}"
        terminalreporter.write_line(f"{path:>9} {kind:>18}: {passed}/{total} cases pass, ran on: {ran_on}")
    from tests.conformance.runner import FULLY_DELEGATED

    if any(key[:2] == ("opencl", "node") for key in TALLY):
        terminalreporter.write_line(
            f"   opencl: {len(FULLY_DELEGATED)} cases ran fully delegated (every op on the device)"
        )
    try:
        from offload.delegates.opencl.device import BUILD_STATS as s
    except ImportError:
        return
    terminalreporter.write_line(
        f"opencl kernel builds: {s['built']} from source in {s['build_seconds']:.1f} s, "
        f"{s['disk_hits']} from the disk cache in {s['disk_seconds']:.1f} s, {s['memory_hits']} in-process hits"
    )
