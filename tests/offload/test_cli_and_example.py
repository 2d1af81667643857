"""The bundled example model and the command line, checked against onnxruntime."""

import os

import numpy as np
import onnxruntime as ort
import pytest

import offload
from offload.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def example(example_model):
    return example_model


def test_example_matches_onnxruntime(example):
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = offload.evaluate(offload.load(example), {"image": x})["probs"]
    want = ort.InferenceSession(example, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_cli_compile_inspect_run(example, tmp_path, capsys):
    pte = str(tmp_path / "tiny.pte")
    assert main(["compile", example, "-o", pte]) == 0
    with open(pte, "rb") as f:
        assert f.read(8)[4:] == b"ET12"
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    printed = capsys.readouterr().out
    assert "method forward:" in printed and "input  image: (1,3,32,32,fp32)" in printed
    assert "2  onnx::Conv" in printed and "arena bytes:" in printed and "delegates: 0" in printed
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", pte, "--input", f"image={tmp_path / 'x.npy'}", "--output", str(out)]) == 0
    assert "probs: float32[1, 10]" in capsys.readouterr().out
    want = ort.InferenceSession(example, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(np.load(out)["probs"], want, rtol=1e-4, atol=1e-6)


def test_cli_inspect_and_run_a_model_file(example, capsys):
    assert main(["inspect", example, "--ir", "--no-passes"]) == 0  # the graph as written
    printed = capsys.readouterr().out
    assert "(compiled in memory)" in printed
    assert "= Conv(X=%image, W=%conv1.w, B=%conv1.b" in printed
    assert main(["run", example]) == 0
    assert "probs: float32[1, 10]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "no/such/model.onnx"], "no such file"),
        (["inspect", "{truncated}"], "past the end of the file"),
        (["run", "{example}", "--method", "backward"], "no method 'backward'"),
        (["run", "{example}", "--input", "image"], "expects NAME=FILE.npy"),
        (["run", "{example}", "--input", "image=missing.npy"], "cannot read"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(example, tmp_path, capsys, argv, message):
    pte = tmp_path / "t.pte"
    main(["compile", example, "-o", str(pte)])
    truncated = tmp_path / "cut.pte"
    truncated.write_bytes(pte.read_bytes()[:100])
    argv = [a.replace("{example}", example).replace("{truncated}", str(truncated)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("offload: error:") and message in err and "\n" not in err


def test_cli_bad_usage_exits_2():
    with pytest.raises(SystemExit) as e:
        main(["frobnicate"])
    assert e.value.code == 2


def test_cli_inspect_says_what_a_new_shape_costs_a_symbolic_delegate(tmp_path, capsys):
    from tests.delegates.opencl_support import require_opencl

    require_opencl()
    model = os.path.join(os.path.dirname(__file__), "..", "models", "gru_model.onnx")
    pte = str(tmp_path / "gru.pte")
    assert main(["compile", model, "--backend", "opencl", "-o", pte]) == 0
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    printed = capsys.readouterr().out
    assert "opencl: backend" in printed
    assert "symbolic dims batch, seq: specialized per input signature" in printed
    assert "a new signature costs" in printed


def test_cli_inspect_says_a_quantized_model_runs_as_float_on_a_gpu_backend(capsys):
    from tests.delegates.opencl_support import require_opencl

    require_opencl()
    model = os.path.join(ROOT, "tests", "frontends", "tflite", "cnn_int8.tflite")
    assert main(["inspect", model, "--backend", "opencl"]) == 0
    printed = capsys.readouterr().out
    assert "quantized model: runs as float on opencl" in printed
    assert "offload.tflite" not in printed.split("file:")[0]  # every op placed is a float op
    assert "opencl: backend" in printed
    assert main(["inspect", model]) == 0
    assert "runs as float" not in capsys.readouterr().out  # the CPU keeps the integer ops
