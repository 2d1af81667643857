"""Arrays in device memory as inputs and outputs of a run, on the `cuda` backend (``-m cuda``, on a
GPU machine): a CuPy array on the delegate's device goes in without a host copy, one that a CPU op
reads too is copied to the host once, ``output_device="device"`` returns CuPy arrays; values
against onnxruntime, copies counted from profile events."""

from __future__ import annotations

import numpy as np
import pytest

from offload.delegates import registry
from offload.profile import Profile

from .device_arrays_support import N, delegated, mlp
from .device_arrays_support import x as _x
from .opencl_support import reference

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not registry.get("cuda").runtime().is_available(), reason="no CUDA device"),
]


def test_a_cupy_array_on_the_delegates_device_goes_in_and_results_stay_there():
    import cupy as cp

    program = mlp()
    module = delegated(program, "cuda")
    x = _x()
    want = reference(program, {"x": x})
    with module.array_device("cuda"):
        on_device = cp.asarray(x)
    profile = Profile()
    out = module.run({"x": on_device}, profile=profile, output_device="device")
    for k in ("y", "s"):
        assert isinstance(out[k], cp.ndarray) and out[k].dtype == np.float32
        np.testing.assert_allclose(cp.asnumpy(out[k]), want[k], rtol=1e-5, atol=1e-5)
    assert not any(e.name == "copy to host" for e in profile.events if e.cat == "copy")
    host = module.run({"x": on_device})
    np.testing.assert_allclose(host["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_a_cupy_array_a_cpu_op_reads_is_copied_to_the_host_once():
    import cupy as cp

    program = mlp()
    module = delegated(program, "cuda", deny=["Sigmoid"])
    x = _x(1)
    profile = Profile()
    out = module.run({"x": cp.asarray(x)}, profile=profile, output_device="device")
    want = reference(program, {"x": x})
    assert isinstance(out["y"], cp.ndarray) and isinstance(out["s"], np.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out["y"]), want["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["s"], want["s"], rtol=1e-6, atol=1e-6)
    inputs = [e for e in profile.events if e.cat == "copy" and e.args.get("input") == "x"]
    assert [(e.name, e.args["bytes"]) for e in inputs] == [("copy to host", N)]
