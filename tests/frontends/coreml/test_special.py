"""A stateful ML program and an image input (generate_special.py).

The stateful program (iOS18 state, read_state, coreml_update_state): its state persists across
runs of a loaded module, ``reset_state`` zeroes it, and each call's outputs match numpy's, on the
CPU and with the arithmetic delegated to opencl."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import offload
from offload import runtime
from offload.errors import ModelFormatError
from offload.runtime.evaluate import evaluate
from tests.delegates.opencl_support import needs_opencl

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "special")
MODEL = os.path.join(HERE, "accumulator.mlpackage")


def oracle():
    data = np.load(os.path.join(HERE, "accumulator.npz"))
    calls = {}
    for key in data.files:
        kind, rest = key.split(":", 1)
        name, call = rest.split("@")
        calls.setdefault(call, ({}, {}))[kind == "out"][name] = data[key]
    return calls


def test_the_program_is_functional():
    program = offload.load(MODEL)
    fn = program.main
    assert fn.states == ["acc"]
    assert [v.name for v in fn.inputs] == ["acc", "x"]
    assert len(fn.outputs) == 3  # doubled, scaled, then the state's new value
    calls = oracle()
    feeds, want = calls["0"]
    got = evaluate(program, {"acc": np.zeros((2, 3), np.float16), **feeds})
    np.testing.assert_allclose(got["doubled"], want["doubled"], atol=1e-3)


def run_calls(module) -> None:
    calls = oracle()
    method = module.method("main")
    assert [p.name for p in method.inputs] == ["x"] and [p.name for p in method.outputs] == [
        "doubled",
        "scaled",
    ]
    for call in ["0", "1", "2"]:
        feeds, want = calls[call]
        got = module.run(feeds)
        assert set(got) == {"doubled", "scaled"}
        for k in want:
            np.testing.assert_allclose(
                got[k].astype(np.float32), want[k].astype(np.float32), atol=2e-3, err_msg=call
            )
    module.reset_state()
    assert not method.state()["acc"].any()
    feeds, want = calls["reset"]
    got = module.run(feeds)
    for k in want:
        np.testing.assert_allclose(got[k].astype(np.float32), want[k].astype(np.float32), atol=2e-3)


def test_state_persists_across_runs_on_the_cpu(tmp_path):
    offload.save(offload.load(MODEL), tmp_path / "m.pte")
    run_calls(runtime.load(str(tmp_path / "m.pte")))


@needs_opencl
def test_state_persists_across_runs_on_opencl(tmp_path):
    lowered = offload.to_backend(offload.load(MODEL), "opencl")
    assert any(op.op_type == "Delegate" for op in lowered.main.body.operations)
    offload.save(lowered, tmp_path / "m.pte")
    run_calls(runtime.load(str(tmp_path / "m.pte")))


def test_threads_take_turns_on_the_state(tmp_path):
    """Runs from several threads each add their input once: the sum of all of them remains."""
    offload.save(offload.load(MODEL), tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    x = np.full((2, 3), 0.25, np.float16)

    def work():
        for _ in range(8):
            module.run({"x": x})

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(module.method("main").state()["acc"], np.full((2, 3), 8.0, np.float16))


def test_a_state_name_that_is_no_input_is_refused(tmp_path):
    program = offload.load(MODEL)
    program.main.states = ["nothing"]
    with pytest.raises(Exception, match="state 'nothing'"):
        offload.save(program, tmp_path / "m.pte")
        runtime.load(str(tmp_path / "m.pte"))


def test_state_names_in_a_file_are_checked(tmp_path):
    import json

    offload.save(offload.load(MODEL), tmp_path / "m.pte")
    data = (tmp_path / "m.pte").read_bytes()
    good = json.dumps({"inputs": ["acc", "x"], "states": ["acc"]}).encode()
    bad = b'{"inputs": ["acc", "x"], "states": [ "ac"]}'  # as long, naming no input
    assert good in data and len(bad) == len(good)
    (tmp_path / "bad.pte").write_bytes(data.replace(good, bad))
    with pytest.raises(ModelFormatError, match="state 'ac' is not an input"):
        runtime.load(str(tmp_path / "bad.pte"))


def test_an_image_input_is_fed_as_pixels():
    """ImageType: the program scales and biases the pixels itself; the description's color space
    is kept in the program's metadata."""
    here = os.path.join(HERE, "image_input")
    data = np.load(here + ".npz")
    program = offload.load(here + ".mlpackage")
    assert program.metadata["coreml.input.img"].startswith("image BGR 8x8")
    got = evaluate(program, {"img": data["in:img"]})
    np.testing.assert_allclose(got["features"], data["out:features"], rtol=1e-4, atol=1e-4)


def test_a_run_that_raises_leaves_the_state_as_it_was(tmp_path, monkeypatch):
    from offload.errors import KernelError, RunTerminated
    from offload.runtime import kernels

    mul = kernels.find("", "Mul")  # float16: the kernel runs (no prepared call)
    armed = {"on": False, "calls": 0}

    def mul_failing_on_demand(ctx, *args, **kw):
        if armed["on"]:
            armed["calls"] += 1
            if armed["calls"] == 2:  # the second Mul: the state's new value (Add) exists by then
                raise RuntimeError("injected")
        return mul(ctx, *args, **kw)

    monkeypatch.setitem(kernels.KERNELS, ("", "Mul"), mul_failing_on_demand)
    offload.save(offload.load(MODEL), tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    method = module.method("main")
    feeds, _ = oracle()["0"]
    module.run(feeds)
    before = method.state()["acc"]
    options = runtime.RunOptions()
    options.terminate = True
    with pytest.raises(RunTerminated):
        module.run(feeds, options)
    armed["on"] = True
    with pytest.raises(KernelError, match="injected"):
        module.run(feeds)
    np.testing.assert_array_equal(method.state()["acc"], before)
    armed["on"] = False
    got = module.run(feeds)  # the next run starts from the state before the failed ones
    want = 2 * (before.astype(np.float32) + feeds["x"].astype(np.float32))
    np.testing.assert_allclose(got["doubled"].astype(np.float32), want, atol=4e-3)
