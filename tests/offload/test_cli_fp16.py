"""`offload compile --spec opencl.precision=fp16 --calibrate DIR / --input-range`, and what inspect says."""

import numpy as np
import onnxruntime as ort
import pytest

from offload.cli import main
from tests.delegates.opencl_support import needs_opencl


def _calibration_dir(tmp_path, n=3):
    folder = tmp_path / "cal"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for k in range(n):
        np.save(folder / f"{k}.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    return folder


@needs_opencl
def test_calibrated_fp16_compile_runs_and_inspect_shows_precision_and_error(example_model, tmp_path, capsys):
    pte = str(tmp_path / "m.pte")
    flags = [
        "--backend",
        "opencl",
        "--spec",
        "opencl.precision=fp16",
        "--calibrate",
        str(_calibration_dir(tmp_path)),
    ]
    assert main(["compile", example_model, "-o", pte, *flags]) == 0
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    out = capsys.readouterr().out
    assert "precision fp16" in out, out
    assert "fp16 error against float32 on 3 calibration sample(s)" in out, out
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(["run", pte, "--input", f"image={tmp_path / 'x.npy'}", "--output", str(tmp_path / "o.npz")]) == 0
    )
    want = ort.InferenceSession(example_model, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "o.npz")["probs"], want, rtol=2e-2, atol=2e-3)


@needs_opencl
def test_without_ranges_inspect_says_why_values_stay_float32(example_model, tmp_path, capsys):
    pte = str(tmp_path / "m.pte")
    assert (
        main(["compile", example_model, "-o", pte, "--backend", "opencl", "--spec", "opencl.precision=fp16"])
        == 0
    )
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    out = capsys.readouterr().out
    assert "precision fp16 (mixed)" in out and "range unknown" in out, out


@needs_opencl
def test_an_input_range_proves_ranges(example_model, tmp_path, capsys):
    pte = str(tmp_path / "m.pte")
    flags = ["--backend", "opencl", "--spec", "opencl.precision=fp16", "--input-range", "image=-1,1"]
    assert main(["compile", example_model, "-o", pte, *flags]) == 0
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    out = capsys.readouterr().out
    assert "precision fp16" in out and "range unknown (give" not in out.split("image")[0], out


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--input-range", "image=1"], "--input-range expects NAME=LO,HI"),
        (["--input-range", "nope=0,1"], "the model has no input 'nope'"),
        (["--input-range", "image=2,1"], "LO must not exceed HI"),
        (["--calibrate", "/nonexistent"], "not a folder"),
    ],
)
def test_bad_calibration_flags_are_one_line_errors(example_model, tmp_path, capsys, flags, message):
    args = ["compile", example_model, "-o", str(tmp_path / "m.pte"), "--backend", "opencl", *flags]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


def test_calibrate_needs_a_backend(example_model, tmp_path, capsys):
    assert main(["compile", example_model, "-o", str(tmp_path / "m.pte"), "--calibrate", str(tmp_path)]) == 2
    assert "need --backend" in capsys.readouterr().err
