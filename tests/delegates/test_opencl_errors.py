"""When an OpenCL kernel does not build: the build log reaches the user, the partition runs on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime

from .opencl_support import model, needs_opencl

pytestmark = needs_opencl
RNG = np.random.default_rng(9)


@pytest.fixture
def broken_builds(monkeypatch):
    """Every kernel source gains a line no OpenCL compiler accepts."""
    from offload.delegates.opencl import device
    from offload.delegates.opencl import runtime as cl_runtime

    real = device.build
    monkeypatch.setattr(
        cl_runtime,
        "build",
        lambda dev, source, options="": real(dev, source + "\n#error broken_on_purpose\n", options),
    )


def _saved(tmp_path):
    w = RNG.standard_normal((5, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    p = model(nodes, [("x", [3, 5])], ["y"], [("w", w)])
    path = tmp_path / "m.pte"
    offload.save(offload.to_backend(p, "opencl", passes="none"), path)
    return p, path


def test_a_build_failure_falls_back_to_the_cpu_with_the_build_log(broken_builds, tmp_path):
    p, path = _saved(tmp_path)
    with pytest.warns(RuntimeWarning, match="broken_on_purpose"):
        module = runtime.load(str(path))
    (info,) = module.method("forward").delegates
    assert info.backend == "opencl" and info.runs_on == "cpu fallback"
    assert "kernel build failed" in info.reason and "broken_on_purpose" in info.reason
    x = {"x": RNG.standard_normal((3, 5)).astype(np.float32)}
    np.testing.assert_array_equal(module.run(x)["y"], offload.evaluate(p, x)["y"])


def test_strict_makes_a_build_failure_an_error(broken_builds, tmp_path):
    _, path = _saved(tmp_path)
    with pytest.raises(offload.errors.BackendUnavailableError, match="broken_on_purpose"):
        runtime.load(str(path), strict=True)
