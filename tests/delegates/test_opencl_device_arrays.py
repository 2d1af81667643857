"""Arrays in device memory as inputs and outputs of a run, on the `opencl` backend.

A ``pyopencl.array.Array`` made on the delegates' context (``Module.array_device("opencl")``) goes
into the delegate that reads it buffer to buffer; one from another context, or one that a CPU op
reads too, is copied to the host once. ``output_device="device"`` returns what the delegates
compute as pyopencl arrays. Copies are counted from profile events (bytes); values are compared
with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import offload
from offload import runtime
from offload.errors import DTypeError, OffloadError, ShapeError
from offload.partitioner import Partitioner
from offload.profile import Profile

from .device_arrays_support import Exporter, N, delegated, mlp
from .device_arrays_support import x as _x
from .opencl_support import _ONNX, model, needs_opencl, reference

pytestmark = needs_opencl


def _delegated(program, deny=()):
    return delegated(program, "opencl", deny)


def _copies(module, feeds, **kw):
    profile = Profile()
    out = module.run(feeds, profile=profile, **kw)
    return out, [(e.name, e.args["bytes"]) for e in profile.events if e.cat == "copy"]


def _on(queue, x):
    import pyopencl.array as cla

    return cla.to_device(queue, x)


def test_an_array_on_the_delegates_context_goes_in_without_a_host_copy():
    program = mlp()
    module = _delegated(program)  # Sigmoid on opencl too: only the delegate reads x
    queue = module.array_device("opencl")
    x = _x()
    from_host, host_copies = _copies(module, {"x": x})
    from_device, device_copies = _copies(module, {"x": _on(queue, x)})
    want = reference(program, {"x": x})
    for k in ("y", "s"):
        np.testing.assert_array_equal(from_device[k], from_host[k])
        np.testing.assert_allclose(from_device[k], want[k], rtol=1e-5, atol=1e-5)
    assert host_copies[0] == ("copy to device", N)
    # the input crossed no host: copied buffer to buffer into the delegate's own input buffer
    assert device_copies[:2] == [("copy to device", 0), ("copy on device", N)]
    assert not any(name == "copy to host" and size == N for name, size in device_copies)


def test_an_array_of_another_context_or_read_by_a_cpu_op_is_copied_to_the_host_once():
    import pyopencl as cl

    program = mlp()
    x = _x(1)
    want = reference(program, {"x": x})
    module = _delegated(program)
    own = module.array_device("opencl")
    other = cl.CommandQueue(cl.Context([own.device]))  # the same device, another context
    mixed = _delegated(program, deny=["Sigmoid"])  # x is read by the delegate and by Sigmoid on the CPU
    for m, queue in ((module, other), (mixed, mixed.array_device("opencl"))):
        out, copies = _copies(m, {"x": _on(queue, x)})
        for k in ("y", "s"):
            np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-5)
        assert copies[:2] == [("copy to host", N), ("copy to device", N)]


def test_device_outputs_are_pyopencl_arrays_and_cpu_outputs_stay_numpy():
    import pyopencl.array as cla

    program = mlp()
    module = _delegated(program, deny=["Sigmoid"])
    queue = module.array_device("opencl")
    x = _x(2)
    want = reference(program, {"x": x})
    out, copies = _copies(module, {"x": _on(queue, x)}, output_device="device")
    assert isinstance(out["y"], cla.Array) and out["y"].context == queue.context
    assert out["y"].dtype == np.float32 and out["y"].shape == (16, 8)
    np.testing.assert_allclose(out["y"].get(), want["y"], rtol=1e-5, atol=1e-5)
    assert isinstance(out["s"], np.ndarray)  # computed on the CPU
    np.testing.assert_allclose(out["s"], want["s"], rtol=1e-6, atol=1e-6)
    assert ("copy to host", 16 * 8 * 4) not in copies  # y never came to the host
    # the default is unchanged: host numpy arrays
    assert isinstance(module.run({"x": x})["y"], np.ndarray)
    with pytest.raises(OffloadError, match=r"output_device must be 'host' or 'device', not 'gpu'"):
        module.run({"x": x}, output_device="gpu")


def test_under_fp16_a_device_output_is_converted_on_the_device():
    program = mlp()
    low = offload.to_backend(
        program, "opencl", {"opencl": {"precision": "fp16", "mixed": "0"}}, passes="none"
    )
    module = runtime.load(offload.save(low))
    x = _x(3)
    out = module.run({"x": x}, output_device="device")
    assert out["y"].dtype == np.float32
    # half → float is exact: the same values as the host copy's, within half's rounding of onnxruntime's
    np.testing.assert_array_equal(out["y"].get(), module.run({"x": x})["y"])
    np.testing.assert_allclose(out["y"].get(), reference(program, {"x": x})["y"], rtol=1e-2, atol=1e-2)


def test_a_device_array_is_checked_where_it_is(monkeypatch):
    import pyopencl.array as cla

    module = _delegated(mlp())
    queue = module.array_device("opencl")

    def no_copy(*args, **kwargs):
        raise AssertionError("the array was copied to the host to be checked")

    wrong_dtype, wrong_shape = _on(queue, _x().astype(np.float64)), _on(queue, np.zeros((16, 31), np.float32))
    monkeypatch.setattr(cla.Array, "get", no_copy)
    with pytest.raises(DTypeError, match=r"input 'x' has dtype float64, the model declares float32"):
        module.run({"x": wrong_dtype})
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(16, 31\)"):
        module.run({"x": wrong_shape})


def test_the_session_takes_device_arrays_and_returns_them():
    import pyopencl.array as cla

    program = mlp()
    session = offload.InferenceSession(_ONNX[program], providers=["opencl"])
    queue = session.array_device("OpenCLExecutionProvider")
    assert queue is not None and session.array_device("cuda") is None
    x = _x(4)
    want = reference(program, {"x": x})
    y, s = session.run(["y", "s"], {"x": _on(queue, x)}, output_device="device")
    assert isinstance(y, cla.Array) and isinstance(s, cla.Array)
    np.testing.assert_allclose(y.get(), want["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.get(), want["s"], rtol=1e-5, atol=1e-5)
    (y_host,) = session.run(["y"], {"x": Exporter(x)})  # a host DLPack exporter: read in place
    np.testing.assert_allclose(y_host, want["y"], rtol=1e-5, atol=1e-5)


def test_a_device_result_that_the_next_delegate_reads_goes_to_it_on_the_device():
    import pyopencl.array as cla

    # u = tanh(x) is a result and an input of the second delegate (Sigmoid runs on the CPU between)
    nodes = [
        helper.make_node("Tanh", ["x"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Add", ["u", "s"], ["y"]),
    ]
    program = model(nodes, [("x", [16, 32])], ["y", "u"])
    low = offload.to_backend(program, Partitioner("opencl", deny_ops=["Sigmoid"]), passes="none")
    module = runtime.load(offload.save(low))
    x = _x(5)
    want = reference(program, {"x": x})
    on_host, host_copies = _copies(module, {"x": x})
    out, copies = _copies(module, {"x": x}, output_device="device")
    for k in ("y", "u"):
        assert isinstance(out[k], cla.Array) and isinstance(on_host[k], np.ndarray)
        np.testing.assert_array_equal(out[k].get(), on_host[k])
        np.testing.assert_allclose(out[k].get(), want[k], rtol=1e-6, atol=1e-6)
    assert ("copy on device", N) in copies and ("copy on device", N) not in host_copies
