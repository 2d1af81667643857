"""Running delegates: on their backend (init once, execute, destroy), or on the CPU fallback."""

import mmap
import threading
import time
import warnings

import numpy as np
import pytest

import offload
from offload import runtime
from offload.delegates import faults
from offload.errors import BackendUnavailableError, DTypeError, KernelError, ShapeError
from offload.runtime import delegates as runtime_delegates
from tests.delegated import FakeRuntime, delegated_program, expected, registry_of

X = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5) / 2
W = [np.full((2, 3), 2, np.float32), np.full((2, 3), 3, np.float32)]


@pytest.fixture
def backends(monkeypatch):
    """Install fake runtimes as the registry the runtime resolves delegates through."""

    def install(*runtimes):
        monkeypatch.setattr(runtime_delegates, "find_backend", registry_of(*runtimes))

    return install


@pytest.fixture
def pte_file(tmp_path):
    path = tmp_path / "model.pte"
    offload.save(delegated_program(blobs=[b"one", b"two"]), path)
    return str(path)


def _evaluate_reference():
    """offload.evaluate's result (it runs the fallback blocks), checked against plain numpy."""
    z = offload.evaluate(delegated_program(blobs=[b"one", b"two"]), {"x": X})["z"]
    np.testing.assert_array_equal(z, expected(X, W))
    return z


def _load_quietly(source, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = runtime.load(source, **kw)
    return module, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_available_backend_runs_the_delegates(backends, pte_file):
    fake = FakeRuntime()
    backends(fake)
    module, warned = _load_quietly(pte_file)
    assert not warned
    assert [p for p, _, _ in fake.inits] == [b"one", b"two"]  # init once per delegate, at load
    assert all(specs == [offload.delegates.backend.CompileSpec("k", b"1")] for _, specs, _ in fake.inits)
    for _ in range(2):
        np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())
    assert fake.executes == 4
    assert module.method("forward").delegates == [("fake", "backend", "")] * 2
    assert module.method_names == ["forward"]


@pytest.mark.parametrize("name", ["__offload_fallback__/{plan}/{k}", "{plan}/delegate{k}/fallback"])
def test_fallback_plans_are_found_by_their_compile_spec_whatever_their_name(name, monkeypatch, tmp_path):
    # files written with the earlier "<plan>/delegate<k>/fallback" names load and run the same
    from offload.emit import delegates as emit_delegates

    monkeypatch.setattr(emit_delegates, "FALLBACK_PLAN_NAME", name)
    path = tmp_path / "model.pte"
    offload.save(delegated_program(blobs=[b"one", b"two"]), path)
    module, _ = _load_quietly(str(path))  # no fake backend: both delegates on their fallbacks
    assert module.plan_names == ["forward"] + [name.format(plan="forward", k=k) for k in range(2)]
    assert module.method_names == ["forward"]
    np.testing.assert_array_equal(module.run({"x": X})["z"], expected(X, W))


def test_weights_given_to_init_are_the_fallbacks_constants_in_the_file(backends, pte_file):
    fake = FakeRuntime()
    backends(fake)
    module = runtime.load(pte_file)
    for k, (_, _, weights) in enumerate(fake.inits):
        (name,) = weights
        assert name == f"d{k}/w"
        w = weights[name]
        np.testing.assert_array_equal(w, W[k])
        assert not w.flags.writeable
        fallback = module.method(f"__offload_fallback__/forward/{k}")
        (const,) = fallback.constants.values()
        assert np.shares_memory(w, const)
        # Zero-copy: the array's memory is the mapped file itself.
        root = w
        while isinstance(root.base, np.ndarray):
            root = root.base
        assert isinstance(root.base, memoryview) and isinstance(root.base.obj, mmap.mmap)


@pytest.mark.parametrize(
    "runtimes, reason",
    [
        ((), "not installed"),
        ((FakeRuntime(available=False),), "no fake device here"),
        ((FakeRuntime(fail_init=True),), "init failed: RuntimeError: fake device is busy"),
    ],
    ids=["unknown", "unavailable", "init-raises"],
)
def test_fallback_runs_the_cpu_plan_and_warns_once(backends, pte_file, runtimes, reason):
    backends(*runtimes)
    module, warned = _load_quietly(pte_file)
    assert len(warned) == 1  # two delegates of one backend: one warning
    assert "'fake'" in str(warned[0].message) and reason in str(warned[0].message)
    np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())
    assert [(b, where) for b, where, _ in module.method("forward").delegates] == [
        ("fake", "cpu fallback")
    ] * 2
    assert reason in module.method("forward").delegates[0].reason
    assert all(r.executes == 0 for r in runtimes)


def test_fallback_equals_backend_bit_for_bit(backends, pte_file):
    backends()
    module, _ = _load_quietly(pte_file)
    on_cpu = module.run({"x": X})["z"]
    backends(FakeRuntime())
    on_backend = runtime.load(pte_file).run({"x": X})["z"]
    assert on_cpu.tobytes() == on_backend.tobytes()


def test_strict_load_raises_instead_of_falling_back(backends, pte_file):
    backends(FakeRuntime(available=False))
    with pytest.raises(BackendUnavailableError, match=r"fake.*no fake device here"):
        runtime.load(pte_file, strict=True)


def test_strict_failure_destroys_handles_already_made(backends):
    good, bad = FakeRuntime("good"), FakeRuntime("bad", available=False)
    backends(good, bad)
    data = offload.save(delegated_program(blobs=[b"a", b"b"], backends=("good", "bad")))
    with pytest.raises(BackendUnavailableError):
        runtime.load(data, strict=True)
    assert good.destroyed == [1]


def test_close_and_context_manager_destroy_handles(backends, pte_file):
    fake = FakeRuntime()
    backends(fake)
    with runtime.load(pte_file) as module:
        module.run({"x": X})
    assert fake.destroyed == [1, 2]
    module.close()  # a second close destroys nothing twice
    assert fake.destroyed == [1, 2]


BAD_RESULTS = pytest.mark.parametrize(
    "result, error, match",
    [
        (lambda ins: [], KernelError, "returned 0 outputs"),
        (lambda ins: [ins[0].astype(np.float64)], DTypeError, "output 0 is float64"),
        (lambda ins: [np.zeros((3, 2), np.float32)], ShapeError, r"shape \[3, 2\]"),
        (lambda ins: 1 / 0, KernelError, "ZeroDivisionError"),
    ],
    ids=["count", "dtype", "shape", "raises"],
)


@BAD_RESULTS
def test_bad_backend_results_are_clear_errors_under_strict(backends, pte_file, result, error, match):
    backends(FakeRuntime(result=result))
    module = runtime.load(pte_file, strict=True)
    with pytest.raises(error, match=match) as info:
        module.run({"x": X})
    assert "backend 'fake'" in str(info.value)


@BAD_RESULTS
def test_bad_backend_results_run_the_call_on_the_cpu_with_a_warning(backends, pte_file, result, error, match):
    backends(FakeRuntime(result=result))
    module = runtime.load(pte_file)
    with pytest.warns(RuntimeWarning, match=match):
        got = module.run({"x": X})["z"]
    np.testing.assert_array_equal(got, _evaluate_reference())  # never a wrong answer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per delegate and reason
        np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())


def test_an_injected_device_loss_at_run_falls_back_and_recovers(backends, pte_file):
    fake = FakeRuntime()
    backends(fake)
    module, _ = _load_quietly(pte_file)
    with faults.inject("fake", "execute", times=1), pytest.warns(RuntimeWarning, match="device lost"):
        np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())
    calls = fake.executes
    np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())
    assert fake.executes == calls + 2  # the device is back: both delegates run on it again


def test_an_injected_failure_at_init_runs_the_partition_on_the_cpu(backends, pte_file):
    backends(FakeRuntime())
    with faults.inject("fake", "init"):
        module, warned = _load_quietly(pte_file)
    assert warned and all(d.runs_on == "cpu fallback" for d in module.method("forward").delegates)
    assert "device lost" in module.method("forward").delegates[0].reason
    np.testing.assert_array_equal(module.run({"x": X})["z"], _evaluate_reference())
    with faults.inject("fake", "init"), pytest.raises(BackendUnavailableError):
        runtime.load(pte_file, strict=True)


# ---- the command line, with the example plugin backend -------------------------------------------


def _cli(capsys, *argv):
    from offload.cli import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_compile_run_inspect_with_a_backend(example_model, tmp_path, capsys, monkeypatch):
    from offload.delegates import registry

    if registry.find("example") is None:
        pytest.skip("the example backend plugin is not installed")
    out = str(tmp_path / "m.pte")
    rc, printed, _ = _cli(
        capsys,
        "compile",
        example_model,
        "--no-passes",
        "--backend",
        "example",
        "--deny-op",
        "Relu",
        "-o",
        out,
    )
    assert rc == 0 and "delegated 8/10 ops in 3 partition(s) to example" in printed
    rc, printed, _ = _cli(capsys, "run", out)
    assert rc == 0 and "with delegates on example x3" in printed
    rc, printed, _ = _cli(capsys, "inspect", out)
    assert rc == 0 and "delegates: 3" in printed and printed.count("example: backend") == 3
    rc, printed, _ = _cli(capsys, "inspect", example_model, "--backend", "example", "--min-ops", "3")
    assert rc == 0 and "partitions: 1" in printed and "example#0" in printed

    monkeypatch.setenv("OFFLOAD_EXAMPLE_BACKEND_DISABLE", "1")
    rc, printed, err = _cli(capsys, "run", out)
    assert rc == 0 and "on the CPU: example (cpu fallback) x3, example cannot run here" in printed
    # The command line shows the fallback warning as one line, like its errors.
    assert err.strip().splitlines() == [
        f"offload: warning: {out}: backend 'example' cannot run here "
        "(disabled by OFFLOAD_EXAMPLE_BACKEND_DISABLE=1); its delegates run on the CPU fallback"
    ]
    rc, printed, err = _cli(capsys, "run", out, "--strict")
    assert rc == 2 and "backend 'example' cannot run it" in err
    rc, printed, _ = _cli(capsys, "inspect", out)
    assert "example: cpu fallback (disabled by OFFLOAD_EXAMPLE_BACKEND_DISABLE=1)" in printed


def test_cli_spec_flags_are_checked(example_model, tmp_path, capsys):
    out = str(tmp_path / "m.pte")
    rc, _, err = _cli(capsys, "compile", example_model, "--deny-op", "Relu", "-o", out)
    assert rc == 2 and "need --backend" in err
    rc, _, err = _cli(
        capsys, "compile", example_model, "--backend", "example", "--spec", "nodot=1", "-o", out
    )
    assert rc == 2 and "NAME.key=value" in err


class _Overlaps(FakeRuntime):
    """Counts how many threads are inside ``execute`` on one handle at once (a sleep widens the
    window)."""

    def __init__(self, thread_safe: bool):
        super().__init__()
        self.thread_safe = thread_safe
        self.inside: dict[int, int] = {}
        self.most = 0
        self.guard = threading.Lock()

    def execute(self, handle, inputs):
        with self.guard:
            self.inside[handle["id"]] = self.inside.get(handle["id"], 0) + 1
            self.most = max(self.most, self.inside[handle["id"]])
        time.sleep(0.002)
        try:
            return super().execute(handle, inputs)
        finally:
            with self.guard:
                self.inside[handle["id"]] -= 1


@pytest.mark.parametrize("thread_safe", [False, True])
def test_a_backend_not_declared_thread_safe_runs_one_call_per_handle_at_a_time(
    backends, pte_file, thread_safe
):
    fake = _Overlaps(thread_safe)
    backends(fake)
    module, _ = _load_quietly(pte_file)
    want = _evaluate_reference()
    results = []

    def work():
        results.extend(module.run({"x": X})["z"] for _ in range(20))

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 120 and all(np.array_equal(z, want) for z in results)
    if thread_safe:
        assert fake.most > 1  # the runtime adds no lock of its own
    else:
        assert fake.most == 1
