"""`offload compile / inspect / run` on Core ML packages, like any model file."""

from __future__ import annotations

import os

import numpy as np

from offload.cli import main
from tests.frontends.coreml.test_ops import OPS, load_case
from tests.frontends.coreml.test_special import HERE, oracle


def test_compile_inspect_run_an_mlpackage(tmp_path, capsys):
    package = os.path.join(OPS, "linear_3d.mlpackage")
    inputs, want, _ = load_case("linear_3d")
    pte = str(tmp_path / "m.pte")
    assert main(["compile", package, "-o", pte]) == 0
    assert main(["inspect", package]) == 0
    assert "input  x: (2,3,4,fp32)" in capsys.readouterr().out
    np.save(tmp_path / "x.npy", inputs["x"])
    out = tmp_path / "out.npz"
    assert main(["run", pte, "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out)]) == 0
    got = np.load(out)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=1e-5, atol=1e-5)


def test_inspect_lists_a_state(tmp_path, capsys):
    pte = str(tmp_path / "acc.pte")
    assert main(["compile", os.path.join(HERE, "accumulator.mlpackage"), "-o", pte]) == 0
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    text = capsys.readouterr().out
    assert "state  acc: (2,3,fp16)" in text and "input  x: (2,3,fp16)" in text
    feeds, want = oracle()["0"]
    np.save(tmp_path / "x.npy", feeds["x"])
    out = tmp_path / "out.npz"
    assert main(["run", pte, "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out)]) == 0
    np.testing.assert_allclose(
        np.load(out)["doubled"].astype(np.float32), want["doubled"].astype(np.float32), atol=2e-3
    )
