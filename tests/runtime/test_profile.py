"""Profiles of runs: an event per instruction, delegate call, device kernel and copy; Chrome's format."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np

import offload
from offload import runtime
from offload.profile import Profile
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

HERE = os.path.dirname(__file__)
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "build_example.py")


def _example(tmp_path):
    spec = importlib.util.spec_from_file_location("build_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path / "tiny_cnn.onnx"
    mod.build(str(path))
    return offload.load(str(path))


def _chrome_events(profile: Profile) -> list[dict]:
    """The trace through JSON, checked for the fields Chrome's trace-event format requires."""
    trace = json.loads(json.dumps(profile.trace()))
    events = trace["traceEvents"]
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= set(e)
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0
    return [e for e in events if e["ph"] == "X"]


def _image():
    return {"image": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def test_a_cpu_run_has_one_event_per_instruction_and_per_plan_call(tmp_path):
    module = runtime.load(offload.save(_example(tmp_path)))
    profile = Profile()
    got = module.run(_image(), profile=profile)
    np.testing.assert_array_equal(got["probs"], module.run(_image())["probs"])  # profiling changes nothing
    events = _chrome_events(profile)
    method = module.method("forward")
    steps = [e for e in events if e["cat"] != "plan"]
    assert sorted(e["args"]["pc"] for e in steps) == list(range(len(method.instructions)))
    assert [e["name"] for e in events if e["cat"] == "plan"] == ["plan forward"]
    assert {e["args"]["op"] for e in steps if e["cat"] == "kernel"} >= {
        "onnx::Conv",
        "onnx::Relu",
        "onnx::Softmax",
    }
    assert "kernel" in profile.summary()


def test_a_loop_shows_each_iteration_it_ran():
    """The Loop is lowered to jumps in the chain: its body's instructions appear once per iteration."""
    module = runtime.load(offload.save(offload.load(fixtures.path("control_flow"))))
    for case in (0, 1):
        profile = Profile()
        feeds = fixtures.inputs("control_flow", case, np.random.default_rng(case))
        module.run(feeds, profile=profile)
        names = [e["name"] for e in _chrome_events(profile)]
        assert names.count("/step/Gemm") == int(feeds["steps"])
        assert names.count("/inp/Gemm") + names.count("/inp_1/Gemm") == 1  # one If branch ran


@needs_opencl
def test_an_opencl_run_has_delegate_kernel_and_copy_events(tmp_path):
    lowered = offload.to_backend(_example(tmp_path), "opencl")
    module = runtime.load(offload.save(lowered))
    module.run(_image())  # specialized and built: the profile sees the steady state
    profile = Profile()
    module.run(_image(), profile=profile)
    events = _chrome_events(profile)
    (delegate,) = module.method("forward")._delegates.values()
    (spec,) = delegate.handle.specializations.entries.values()
    device = [e for e in events if e["cat"] == "device"]
    assert [e["name"] for e in device] == [launch.kernel.function_name for launch in spec.launches]
    assert len([e for e in events if e["cat"] == "delegate"]) == 1
    copies = {e["name"]: e["args"]["bytes"] for e in events if e["cat"] == "copy"}
    assert copies == {"copy to device": 3 * 32 * 32 * 4, "copy to host": 10 * 4}
    tracks = {e["tid"] for e in device}
    assert len(tracks) == 1 and tracks.isdisjoint({e["tid"] for e in events if e["cat"] == "delegate"})


@needs_opencl
def test_a_new_shape_shows_its_specialization():
    program = offload.load(fixtures.path("gru_model"))
    module = runtime.load(offload.save(offload.to_backend(program, "opencl")))
    profile = Profile()
    for case in (0, 1, 0):
        module.run(fixtures.inputs("gru_model", case, np.random.default_rng(case)), profile=profile)
    names = [e["name"] for e in _chrome_events(profile)]
    assert names.count("specialize") == 2  # the third run met its shape again


@needs_opencl
def test_a_profiled_load_shows_each_kernel_build(tmp_path, monkeypatch):
    """Kernel builds (here from source: an empty disk cache, the process cache cleared) are
    events of the profile that is active while the module loads."""
    from offload.delegates.opencl import device as cl_device
    from offload.profile import profiling

    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path / "cache"))
    cl_device.clear_memory_cache()
    lowered = offload.save(offload.to_backend(_example(tmp_path), "opencl"))
    built = cl_device.BUILD_STATS["built"]
    profile = Profile()
    with profiling(profile):
        runtime.load(lowered).run(_image())
    builds = [e for e in _chrome_events(profile) if e["cat"] == "build"]
    assert len(builds) == cl_device.BUILD_STATS["built"] - built > 0
    assert all(e["name"] == "kernel build" and e["args"]["origin"] == "source" for e in builds)
