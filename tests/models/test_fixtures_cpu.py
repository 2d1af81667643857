"""Exporter-made models with symbolic dims on the CPU executor, against onnxruntime.

The fixtures are made by ``generate.py`` (torch's ONNX exporters); each shape case of
``fixtures.py`` changes the symbolic dims (batch, height/width, sequence length), so one
imported program must take them all.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import offload
from tests.models import fixtures

# (fixture, shape case) -> why offload cannot run it yet; each is xfail(strict=True).
EXPECTED_FAILURES: dict[tuple[str, int], str] = {}

CASES = [
    pytest.param(
        name,
        case,
        id=f"{name}-{fixtures.case_id(name, case)}",
        marks=[pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[name, case])]
        if (name, case) in EXPECTED_FAILURES
        else [],
    )
    for name in fixtures.FIXTURES
    for case in range(fixtures.CASES[name])
]


@pytest.fixture(scope="module")
def programs():
    return {}


@pytest.fixture(scope="module")
def sessions():
    return {}


def _program(programs, name):
    if name not in programs:
        programs[name] = offload.load(fixtures.path(name))
    return programs[name]


def _session(sessions, name):
    if name not in sessions:
        sessions[name] = ort.InferenceSession(fixtures.path(name), providers=["CPUExecutionProvider"])
    return sessions[name]


@pytest.mark.parametrize("name", fixtures.FIXTURES)
def test_fixture_import_keeps_symbolic_dims(name):
    """offload's imported inputs have the file's symbolic dims where the file has them."""
    model = onnx.load(fixtures.path(name), load_external_data=False)
    program = offload.load(fixtures.path(name))
    offload.ir.verify(program)
    got = {v.name: v.type.shape for v in program.main.inputs}
    symbolic = 0
    for v in model.graph.input:
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            if d.HasField("dim_param"):
                assert got[v.name][i] == d.dim_param, (v.name, i, got[v.name])
                symbolic += 1
            else:
                assert got[v.name][i] == d.dim_value, (v.name, i, got[v.name])
    assert symbolic, f"{name}: no symbolic input dim"


@pytest.mark.parametrize(("name", "case"), CASES)
def test_fixture_matches_onnxruntime(programs, sessions, name, case):
    feeds = fixtures.inputs(name, case, np.random.default_rng(1000 + case))
    sess = _session(sessions, name)
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    got = offload.evaluate(_program(programs, name), feeds)
    assert list(got) == list(want)
    for out, w in want.items():
        g = np.asarray(got[out])
        assert g.dtype == w.dtype, (out, g.dtype, w.dtype)
        assert g.shape == w.shape, (out, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} case {case} output {out}")
