"""Device loops of the GPU backends under ``RunOptions``: a deadline or ``terminate`` stops a run
inside a Loop delegated to opencl within one iteration, with the error the CPU path raises; the
host never runs more than a bounded number of commands ahead of the device (memory stays flat);
another thread waiting for the same delegate is not held past its own deadline.

``control.run`` is tested alone on a model of an in-order queue; the opencl runs (PoCL) go to a
child process with a time limit, so a run that does not stop fails the test instead of hanging
pytest. Both runtimes are checked to hand ``control.run`` the run's fence and options; the same
child runs on cuda where a CUDA device is (``-m cuda``, .ci/gpu-check)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from offload.delegates import registry
from offload.delegates.backend import run_options
from offload.delegates.gpu import control
from offload.delegates.gpu.api import Buf
from offload.errors import RunTerminated
from offload.runtime import RunOptions

from .opencl_support import needs_opencl

ROOT = Path(__file__).resolve().parents[2]


class Queue:
    """An in-order queue whose device runs only when the host waits for a mark."""

    def __init__(self):
        self.enqueued = self.done = 0
        self.most_ahead = 0

    def command(self, *_):
        self.enqueued += 1
        self.most_ahead = max(self.most_ahead, self.enqueued - self.done)

    def fence(self):
        at = self.enqueued

        def wait():
            self.done = max(self.done, at)

        return wait


def _loop(trips: int, body: int) -> list:
    """A loop of ``trips`` iterations whose body is ``body`` launches and one copy."""
    head = control.LoopHead(trips, None, None, exit=body + 3, name="Loop 'L'")
    return [head, *["k"] * body, control.Copy([Buf(0), Buf(1)], 8), control.LoopBack(0)]


class Stop:
    """RunOptions stand-in that stops at its ``after``-th check."""

    def __init__(self, after: int):
        self.after, self.checks = after, 0

    def check(self, where: str) -> None:
        self.checks += 1
        if self.checks > self.after:
            raise RunTerminated(f"{where}: the run was terminated (RunOptions.terminate)")


@pytest.mark.parametrize("body", [1, 3, 700])
def test_an_unbounded_loop_stays_a_bounded_number_of_commands_ahead(body):
    q = Queue()
    control.run(_loop(5000, body), q.command, q.command, lambda v: True, q.command, q.fence)
    assert q.enqueued == 5000 * (body + 1)
    assert q.most_ahead <= 2 * (control.MARK_EVERY + body + 1)  # two marks, each after an iteration


def test_a_bounded_loop_waits_for_each_iteration_and_stops_at_the_check():
    q = Queue()
    stop = Stop(after=4)
    with pytest.raises(RunTerminated, match=r"gpu backend: Loop 'L', iteration 4: the run was terminated"):
        control.run(_loop(10**9, 3), q.command, q.command, lambda v: True, q.command, q.fence, stop)
    assert q.enqueued == 4 * 4  # four iterations enqueued, the fifth stopped at its head
    assert q.most_ahead <= 4  # never more than one iteration ahead of the device
    assert q.done == q.enqueued  # nothing of the stopped run is left queued


def test_a_deadline_stops_the_interpreter_within_an_iteration():
    slow = 0.01  # seconds of "device" time per iteration

    def launch(_):
        time.sleep(slow)

    options = RunOptions(timeout=0.2).start()
    start = time.monotonic()
    with pytest.raises(RunTerminated, match=r"0\.2 s deadline"):
        control.run(_loop(10**9, 1), launch, lambda *a: None, lambda v: True, lambda *a: None, None, options)
    assert time.monotonic() - start < 0.2 + 2 * slow + 0.5


def test_a_waiting_thread_keeps_its_own_deadline():
    lock = threading.Lock()
    lock.acquire()  # another call holds the delegate
    try:
        start = time.monotonic()
        options = RunOptions(timeout=0.1).start()
        with (
            pytest.raises(RunTerminated, match="waiting for another thread's call"),
            control.held(lock, options, "opencl backend"),
        ):
            pass
        assert time.monotonic() - start < 1.0
    finally:
        lock.release()
    with control.held(lock, RunOptions(timeout=0.1).start(), "opencl backend"):
        assert lock.locked()
    assert not lock.locked()


@pytest.mark.parametrize("backend", ["cuda", "opencl"])
def test_each_gpu_runtime_hands_the_run_options_and_a_fence_to_the_control_loop(monkeypatch, backend):
    """Both runtimes run control flow through the shared base (delegates/gpu/runtime.py), which
    passes the run's options and the backend's fence (the fence is made only when the loop asks)."""
    from offload.delegates import registry
    from offload.delegates.gpu import control as gpu_control

    seen = {}

    def fake_run(items, launch, copy, read, write, fence, options, where):
        seen.update(fence=fence, options=options, where=where)

    monkeypatch.setattr(gpu_control, "run", fake_run)
    runtime = registry.get(backend).runtime()
    options = RunOptions(timeout=5)
    token = run_options.set(options)
    try:
        runtime._run_control(SimpleNamespace(), SimpleNamespace(buffers={}, launches=[]))
    finally:
        run_options.reset(token)
    assert seen["options"] is options and callable(seen["fence"]) and seen["where"] == f"{backend} backend"


CHILD = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    BACKEND = sys.argv[1]
    from onnx import TensorProto, helper
    import offload
    from offload import runtime
    from offload.errors import RunTerminated
    from offload.runtime import RunOptions
    from tests.delegates.opencl_support import model

    N = 1 << 18  # elements of the carried value: kernels slower than the host enqueues them
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["acc", "one"], ["acc_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []), vi("acc", TensorProto.FLOAT, [N])],
        [vi("c_out", TensorProto.BOOL, []), vi("acc_out", TensorProto.FLOAT, [N])],
    )
    program = model(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
        [("x", [N]), ("M", [], np.int64)],
        ["y"],
        [("one", np.float32(1))],
    )
    module = runtime.load(offload.save(offload.to_backend(program, BACKEND, passes="none")))
    assert [d[:2] for d in module.method("forward").delegates] == [(BACKEND, "backend")]
    x = np.zeros(N, np.float32)
    huge = np.array(10**9, np.int64)

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096

    def stopped(options, after=None):
        if after is not None:
            threading.Timer(after, lambda: setattr(options, "terminate", True)).start()
        start = time.monotonic()
        try:
            module.run({"x": x, "M": huge}, options)
        except RunTerminated as e:
            return time.monotonic() - start, str(e)
        raise SystemExit("the run ended by itself")

    module.run({"x": x, "M": np.array(3, np.int64)})  # kernels built, buffers made
    before = rss()
    took, why = stopped(RunOptions(timeout=1.0))
    grown = rss() - before
    print("deadline", round(took, 3), grown >> 20, why)
    took, why = stopped(RunOptions(), after=0.5)
    print("terminate", round(took, 3), why)

    got = {}

    def other():
        start = time.monotonic()
        got["y"] = module.run({"x": x + 1, "M": np.array(3, np.int64)})["y"]
        got["took"] = time.monotonic() - start

    t = threading.Timer(0.1, other)
    t.start()
    stopped(RunOptions(timeout=0.5))
    t.join(30)
    np.testing.assert_array_equal(got["y"], np.full(N, 4, np.float32))
    print("other", round(got["took"], 3))
    """
)


def _loop_stops_at_its_deadline_or_terminate(backend: str):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, backend], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split()[0]: line.split(maxsplit=1)[1] for line in done.stdout.splitlines()}
    took, grown_mib, why = lines["deadline"].split(maxsplit=2)
    assert 1.0 <= float(took) < 2.0, lines["deadline"]
    assert f"{backend} backend: Loop 'Loop', iteration" in why and "1.0 s deadline" in why
    assert int(grown_mib) < 32, f"memory grew by {grown_mib} MiB in one second of iterations"
    took, why = lines["terminate"].split(maxsplit=1)
    assert 0.5 <= float(took) < 1.5 and "RunOptions.terminate" in why
    assert float(lines["other"]) < 2.0  # it waited for the stopped run, not for 10**9 iterations


@needs_opencl
def test_a_delegated_loop_stops_at_its_deadline_or_terminate_on_opencl():
    _loop_stops_at_its_deadline_or_terminate("opencl")


@pytest.mark.cuda
@pytest.mark.skipif(not registry.get("cuda").runtime().is_available(), reason="no CUDA device")
def test_a_delegated_loop_stops_at_its_deadline_or_terminate_on_cuda():
    _loop_stops_at_its_deadline_or_terminate("cuda")
