"""Exporter-made models with symbolic dims on the `opencl` backend (PoCL), against onnxruntime.

Each fixture is lowered once; its delegates specialize for every shape case (in order, then the
first case again: a cache hit) and each result is compared with onnxruntime's.
"""

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload import runtime
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

pytestmark = needs_opencl

# Fixtures whose ops the GPU backends do not all take yet: the reason, each xfail(strict=True) on
# the delegated share (their outputs are still compared with onnxruntime below).
NOT_YET_DELEGATED: dict[str, str] = {}
MIN_DELEGATED = 0.95  # share of the model's ops (nested bodies included) that must run on opencl


def _ops(block) -> int:
    return sum(1 + sum(_ops(b) for b in op.blocks) for op in block.operations)


def _delegated_ops(lowered) -> int:
    return sum(
        _ops(op.attributes["fallback"]) for op in lowered.main.body.operations if op.op_type == "Delegate"
    )


@pytest.fixture(scope="module")
def lowered():
    return {}


def _lowered(cache, name):
    if name not in cache:
        # The default passes run first, as in to_backend(program, "opencl"); the share of ops
        # delegated is a share of the optimized program's ops.
        program = offload.optimize(offload.load(fixtures.path(name)))
        cache[name] = (program, offload.to_backend(program, "opencl", passes="none"))
    return cache[name]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=NOT_YET_DELEGATED[n]))
        if n in NOT_YET_DELEGATED
        else n
        for n in fixtures.FIXTURES
    ],
)
def test_most_ops_run_on_opencl(name, lowered):
    program, low = _lowered(lowered, name)
    share = _delegated_ops(low) / _ops(program.main.body)
    assert share >= MIN_DELEGATED, f"{name}: {share:.0%} of its ops delegated"


@pytest.mark.parametrize("name", fixtures.FIXTURES)
def test_every_shape_matches_onnxruntime(name, lowered, tmp_path):
    _, low = _lowered(lowered, name)
    offload.save(low, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    assert all(d[:2] == ("opencl", "backend") for d in module.method("forward").delegates)
    session = ort.InferenceSession(fixtures.path(name), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cases = [*range(fixtures.CASES[name]), 0]  # the first shape again: its specialization is reused
    for case in cases:
        feeds = fixtures.inputs(name, case, np.random.default_rng(case))
        got = module.run(feeds)
        for k, want in zip(names, session.run(names, feeds)):
            assert got[k].dtype == want.dtype and got[k].shape == want.shape, (name, case, k)
            np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-4, err_msg=f"{name} case {case} {k}")
    stats = [d.handle.specializations.stats for d in module.method("forward")._delegates.values()]
    assert all(s.hits >= 1 for s in stats)  # the repeated shape met a specialization it had built
