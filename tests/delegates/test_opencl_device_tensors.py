"""Tensors that stay on the device between two delegates of the same backend.

A delegate output read only by delegates of the same backend (not by a CPU op, not a method
result) is kept in an OpenCL buffer (``CLTensor``) and copied buffer to buffer into the next
delegate instead of crossing to the host and back. The copies are counted from profile events
("copy to device" / "copy to host" / "copy on device", with bytes); results are compared with
onnxruntime.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.partitioner import Partitioner
from offload.profile import Profile

from .opencl_support import model, needs_opencl, reference

pytestmark = needs_opencl
N = 64 * 64 * 4  # bytes of one (64, 64) float32 tensor


def _skip_connection():
    """u = tanh(x) and r = relu(u) on opencl, s = sigmoid(r) on the CPU (denied), y = u + s on
    opencl again: u goes from the first delegate to the second directly, r through the CPU."""
    nodes = [
        helper.make_node("Tanh", ["x"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["u", "s"], ["y"]),
    ]
    return model(nodes, [("x", [64, 64])], ["y"])


def _module(program, specs=None):
    low = offload.to_backend(program, Partitioner("opencl", deny_ops=["Sigmoid"]), specs, passes="none")
    return runtime.load(offload.save(low))


def _copies(module, feeds) -> tuple[dict, list[tuple[str, int]]]:
    profile = Profile()
    out = module.run(feeds, profile=profile)
    return out, [(e.name, e.args["bytes"]) for e in profile.events if e.cat == "copy"]


def _x(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((64, 64)).astype(np.float32)}


def test_an_output_read_only_by_the_next_delegate_stays_on_the_device():
    program = _skip_connection()
    module = _module(program)
    method = module.method("forward")
    assert [d.runs_on for d in method.delegates] == ["backend", "backend"]
    assert method.kept_on_device == 1
    out, copies = _copies(module, _x())
    np.testing.assert_allclose(out["y"], reference(program, _x())["y"], rtol=1e-6, atol=1e-6)
    # delegate 1: x in, r out (u stays); delegate 2: s in from the host, u on the device, y out
    assert copies == [
        ("copy to device", N),
        ("copy to host", N),
        ("copy to device", N),
        ("copy on device", N),
        ("copy to host", N),
    ]


def test_a_method_result_or_a_value_a_cpu_op_reads_is_copied_to_the_host():
    # u is also a result of the method: it must reach the caller, so nothing stays on the device
    nodes = [
        helper.make_node("Tanh", ["x"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["u", "s"], ["y"]),
    ]
    program = model(nodes, [("x", [64, 64])], ["y", "u"])
    module = _module(program)
    assert module.method("forward").kept_on_device == 0
    out, copies = _copies(module, _x())
    assert ("copy on device", N) not in copies
    want = reference(program, _x())
    for k in ("y", "u"):
        np.testing.assert_allclose(out[k], want[k], rtol=1e-6, atol=1e-6)


def test_under_fp16_the_half_bits_move_as_they_are():
    program = _skip_connection()
    module = _module(program, {"opencl": {"precision": "fp16", "mixed": "0"}})
    assert module.method("forward").kept_on_device == 1
    out, copies = _copies(module, _x())
    assert ("copy on device", N // 2) in copies  # half storage: two bytes an element
    # u rounded to half once, s computed from half r, y rounded again: a few u
    np.testing.assert_allclose(out["y"], reference(program, _x())["y"], rtol=3e-3, atol=3e-3)


def test_a_consumer_that_fails_runs_its_fallback_on_host_copies():
    program = _skip_connection()
    module = _module(program)
    method = module.method("forward")
    consumer = method._all_delegates()[1]
    consumer.handle = None  # its backend call now fails: the CPU fallback takes the call
    with pytest.warns(RuntimeWarning, match="runs on the CPU fallback"):
        out = module.run(_x())
    np.testing.assert_allclose(out["y"], reference(program, _x())["y"], rtol=1e-6, atol=1e-6)


def test_threads_sharing_the_module_get_their_own_device_tensors():
    program = _skip_connection()
    module = _module(program)
    feeds = [_x(seed) for seed in range(8)]
    wants = [reference(program, f)["y"] for f in feeds]
    errors = []

    def work(k: int) -> None:
        for j in range(10):
            i = (k + j) % len(feeds)
            got = module.run(feeds[i])["y"]
            if not np.allclose(got, wants[i], rtol=1e-6, atol=1e-6):
                errors.append((k, j))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_inspect_says_how_many_outputs_stay_on_the_device(tmp_path, capsys):
    from offload.cli import main

    low = offload.to_backend(_skip_connection(), Partitioner("opencl", deny_ops=["Sigmoid"]), passes="none")
    offload.save(low, tmp_path / "m.pte")
    assert main(["inspect", str(tmp_path / "m.pte")]) == 0
    assert "delegate outputs kept on the device for the next delegate: 1" in capsys.readouterr().out
