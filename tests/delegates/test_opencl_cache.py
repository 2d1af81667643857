"""The OpenCL program cache: binaries on disk keyed by source, options, device and driver."""

from __future__ import annotations

import pytest

from .opencl_support import needs_opencl

pytestmark = needs_opencl

SOURCE = "__kernel void twice(__global float* x, const int n) { int i = get_global_id(0); if (i < n) x[i] *= 2.0f; }"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty disk cache in tmp_path and an empty in-process cache (as a new process sees it)."""
    from offload.delegates.opencl import device

    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(tmp_path))
    device.clear_memory_cache()
    yield device
    device.clear_memory_cache()


def _run(device, program):
    import numpy as np
    import pyopencl as cl

    dev = device.device_for(None)
    x = np.arange(5, dtype=np.float32)
    buf = dev.allocator.alloc(x.nbytes)
    dev.allocator.copyin(buf, x)
    cl.Kernel(program, "twice")(dev.queue, (5,), None, buf, np.int32(5))
    out = dev.allocator.copyout(buf, (5,), np.float32)
    np.testing.assert_array_equal(out, x * 2)


def test_cold_build_writes_a_binary_that_a_new_process_loads(fresh, tmp_path):
    dev = fresh.device_for(None)
    before = dict(fresh.BUILD_STATS)
    _run(fresh, fresh.build(dev, SOURCE, "-DUNUSED=1"))
    assert fresh.BUILD_STATS["built"] == before["built"] + 1
    (entry,) = (tmp_path / "opencl").iterdir()
    assert entry.name == f"{fresh.cache_key(dev, SOURCE, '-DUNUSED=1')}.bin" and entry.stat().st_size > 0

    fresh.clear_memory_cache()
    _run(fresh, fresh.build(dev, SOURCE, "-DUNUSED=1"))
    assert fresh.BUILD_STATS["built"] == before["built"] + 1  # nothing rebuilt
    assert fresh.BUILD_STATS["disk_hits"] == before["disk_hits"] + 1

    fresh.build(dev, SOURCE, "-DUNUSED=1")
    assert fresh.BUILD_STATS["memory_hits"] == before["memory_hits"] + 1


def test_key_changes_with_source_options_and_device_facts(fresh):
    dev = fresh.device_for(None)
    k = fresh.cache_key(dev, SOURCE, "")
    assert fresh.cache_key(dev, SOURCE + " ", "") != k
    assert fresh.cache_key(dev, SOURCE, "-DTS=8") != k
    assert fresh.cache_key(dev, SOURCE, "") == k


def test_a_corrupt_cache_entry_is_rebuilt_and_replaced(fresh, tmp_path):
    dev = fresh.device_for(None)
    path = tmp_path / "opencl" / f"{fresh.cache_key(dev, SOURCE, '')}.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a binary")
    before = fresh.BUILD_STATS["built"]
    _run(fresh, fresh.build(dev, SOURCE))
    assert fresh.BUILD_STATS["built"] == before + 1
    assert path.read_bytes() != b"not a binary"


def test_empty_cache_dir_turns_the_disk_cache_off(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", "")
    fresh.build(fresh.device_for(None), SOURCE)
    assert fresh.cache_dir() is None
    assert not (tmp_path / "opencl").exists()


def _matmul_program():
    import numpy as np
    from onnx import helper

    from .opencl_support import model

    w = np.random.default_rng(5).standard_normal((37, 53)).astype(np.float32)
    return model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [29, 37])], ["y"], [("w", w)])


def _run_lowered(program, specs, feeds):
    import offload

    lowered = offload.to_backend(program, "opencl", compile_specs=specs, passes="none")
    module = offload.runtime.load(offload.save(lowered))
    assert all(d.runs_on == "backend" for d in module.method("forward").delegates)
    return module.run(feeds)["y"]


def test_quick_tuning_times_tiles_once_and_never_changes_a_result(fresh, tmp_path):
    import json

    import numpy as np

    from offload.delegates.gpu.ops.linalg import VARIANTS

    from .opencl_support import reference

    program = _matmul_program()
    feeds = {"x": np.random.default_rng(6).standard_normal((29, 37)).astype(np.float32)}
    plain = _run_lowered(program, None, feeds)
    tuned = _run_lowered(program, {"opencl": {"tuning": "quick"}}, feeds)
    # every variant sums k in the same order: the tuned kernel gives the very same bits
    assert tuned.tobytes() == plain.tobytes()
    np.testing.assert_allclose(tuned, reference(program, feeds)["y"], rtol=1e-5, atol=1e-5)
    choices = json.loads((tmp_path / "opencl" / "tuning.json").read_text())
    ((key, variant),) = choices.items()
    assert "gemm:29x53x37" in key and variant in VARIANTS

    # a new process finds the choice on disk and times nothing
    fresh.clear_memory_cache()
    calls = []
    fresh.tuning_choice(fresh.device_for(None), key.split("|", 2)[2], list(VARIANTS), calls.append)
    assert calls == []


def test_unknown_tuning_value_is_refused():
    import offload

    with pytest.raises(offload.errors.OffloadError, match="tuning"):
        offload.to_backend(
            _matmul_program(), "opencl", compile_specs={"opencl": {"tuning": "slow"}}, passes="none"
        )


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_entry_fails_its_checksum_and_is_rebuilt(fresh, tmp_path, damage):
    dev = fresh.device_for(None)
    fresh.build(dev, SOURCE)
    (path,) = (tmp_path / "opencl").iterdir()
    good = path.read_bytes()
    data = bytearray(good)
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) - 7] ^= 0x20  # inside the binary, past the tag and checksum
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    fresh.clear_memory_cache()
    before = dict(fresh.BUILD_STATS)
    _run(fresh, fresh.build(dev, SOURCE))
    assert fresh.BUILD_STATS["built"] == before["built"] + 1  # rebuilt, not loaded
    assert fresh.BUILD_STATS["disk_hits"] == before["disk_hits"]
    assert path.read_bytes() == good  # and the entry written whole again


def test_an_unwritable_cache_folder_warns_once_and_builds_anyway(fresh, tmp_path, monkeypatch):
    blocked = tmp_path / "a file"
    blocked.write_bytes(b"")  # the cache folder would have to be inside a file
    monkeypatch.setenv("OFFLOAD_CACHE_DIR", str(blocked))
    dev = fresh.device_for(None)
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache"):
        _run(fresh, fresh.build(dev, SOURCE))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.build(dev, SOURCE + " ")  # another program: no second warning
    assert not list(tmp_path.glob("**/*.tmp"))
