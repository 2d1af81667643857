"""Single MIL ops (made by generate_ops.py with coremltools' MIL builder) against numpy references
of MIL's definitions: on the CPU executor, and lowered to opencl (PoCL) where it runs."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import offload
from offload import runtime
from offload.frontends.coreml import import_coreml
from offload.runtime.evaluate import evaluate
from tests.delegates.opencl_support import needs_opencl

OPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops")
CASES = sorted(os.path.basename(p)[: -len(".npz")] for p in glob.glob(os.path.join(OPS, "*.npz")))


def load_case(name: str):
    data = np.load(os.path.join(OPS, f"{name}.npz"))
    inputs = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    outputs = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    return inputs, outputs, float(data["tolerance"])


def check(name: str, got: dict, want: dict, tolerance: float) -> None:
    assert set(got) >= set(want), f"{name}: outputs {sorted(got)}, expected {sorted(want)}"
    for k, w in want.items():
        g = np.asarray(got[k])
        assert g.shape == w.shape, f"{name}.{k}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "fc":
            scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1.0)
            np.testing.assert_allclose(
                g.astype(np.float64), w, rtol=0, atol=tolerance * scale, err_msg=f"{name}.{k}"
            )
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{name}.{k}")


def test_cases_exist():
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", CASES)
def test_cpu_matches_reference(name):
    inputs, want, tolerance = load_case(name)
    program = import_coreml(os.path.join(OPS, f"{name}.mlpackage"))
    check(name, evaluate(program, inputs), want, tolerance)


@needs_opencl
@pytest.mark.parametrize("name", CASES)
def test_opencl_matches_reference(name, tmp_path):
    inputs, want, tolerance = load_case(name)
    program = offload.to_backend(import_coreml(os.path.join(OPS, f"{name}.mlpackage")), "opencl")
    offload.save(program, tmp_path / "m.pte")
    module = runtime.load(str(tmp_path / "m.pte"))
    check(name, module.run(inputs), want, max(tolerance, 1e-5))


def test_nested_interleaves_become_one_depth_to_space():
    """MIL's concat(interleave=True) on H then W (the catalog's concat_to_pixel_shuffle pattern)
    imports as Unsqueeze/Concat/Reshape stacks that the default passes turn into DepthToSpace."""
    inputs, want, tolerance = load_case("c_nested_interleave")
    program = offload.optimize(import_coreml(os.path.join(OPS, "c_nested_interleave.mlpackage")))
    types = [op.op_type for op in program.main.body.operations]
    assert "DepthToSpace" in types and "Reshape" not in types
    check("c_nested_interleave", evaluate(program, inputs), want, tolerance)


def test_a_counting_while_loop_gets_a_trip_count():
    """while i < n: i += 1 (n from a shape) becomes a Loop with trip count max(n - i0, 0) and no
    data-dependent condition, so the GPU backends can plan it."""
    program = import_coreml(os.path.join(OPS, "c_while_counter.mlpackage"))
    (loop,) = [op for op in program.main.body.walk() if op.op_type == "Loop"]
    assert loop.inputs[0] is not None
    inputs, want, tolerance = load_case("c_while_counter")
    check("c_while_counter", evaluate(program, inputs), want, tolerance)
