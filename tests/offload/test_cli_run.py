"""`offload run` of any model format (compiled on the fly), its inputs and timings, `inspect`
showing what `compile` will place, and every bad path or argument as one line with exit 2."""

import os
import re
import shlex
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from offload.cli import main
from offload.cli_run import random_input
from offload.runtime.module import Port
from tests.delegates.opencl_support import needs_opencl
from tests.models import fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ort(model: str, feeds: dict) -> dict:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def test_run_a_model_on_a_backend_against_onnxruntime(tmp_path, capsys):
    model = fixtures.path("control_flow")
    feeds = fixtures.inputs("control_flow", 1, np.random.default_rng(1))
    argv = ["run", model, "--backend", "example", "--output", str(tmp_path / "o.npz")]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        argv += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "random inputs" not in printed
    lines = printed.splitlines()
    # set-up and the steady run are timed apart
    assert re.search(r"^load: [\d.]+ ms \(import, graph passes, delegation", printed, re.M)
    assert re.search(r"^first run: [\d.]+ ms \(with its one-time set-up", printed, re.M)
    assert re.search(
        r"^ran 'forward' in [\d.]+ ms \(the second run\) with delegates on example x\d", lines[-2]
    )
    got = np.load(tmp_path / "o.npz")
    for name, want in _ort(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


@needs_opencl
def test_run_a_tflite_model_on_opencl_against_litert(tmp_path, capsys):
    from tests.frontends.tflite.litert import litert

    model = os.path.join(ROOT, "tests", "frontends", "tflite", "cnn_f32.tflite")
    with open(model, "rb") as f:
        data = f.read()
    x = np.random.default_rng(5).standard_normal((1, 16, 16, 3)).astype(np.float32)
    (name,) = [n for n in np.load(model[: -len(".tflite")] + ".npz")["input_names"]]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "o.npz"
    assert (
        main(
            [
                "run",
                model,
                "--backend",
                "opencl",
                "--input",
                f"{name}={tmp_path / 'x.npy'}",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert "with delegates on opencl x" in capsys.readouterr().out
    for key, want in litert(data, {name: x}).items():
        np.testing.assert_allclose(np.load(out)[key], want, rtol=1e-4, atol=1e-5)


def test_a_missing_input_is_an_error_naming_it(tmp_path, capsys):
    gru = fixtures.path("gru_model")  # symbolic dims: nothing to make up a shape from
    assert main(["run", gru]) == 2
    err = capsys.readouterr().err
    assert "no value for input(s) 'x' (?,?,8,fp32)" in err and "--random-inputs" in err
    flow = fixtures.path("control_flow")
    np.save(tmp_path / "x.npy", np.zeros((2, 8), np.float32))
    assert main(["run", flow, "--input", f"x={tmp_path / 'x.npy'}"]) == 2
    assert "no value for input(s) 'steps'" in capsys.readouterr().err


def test_random_inputs_are_asked_for_and_said(tmp_path, capsys):
    model = fixtures.path("gru_model")
    out = tmp_path / "o.npz"
    assert main(["run", model, "--random-inputs", "--seed", "7", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "random inputs (--random-inputs, seed 7; symbolic dims as 1): x float32[1, 1, 8]" in printed
    x = random_input(Port("x", onnx_type(model, "x")), np.random.default_rng(7))
    for name, want in _ort(model, {"x": x}).items():
        np.testing.assert_allclose(np.load(out)[name], want, rtol=1e-5, atol=1e-6)


def onnx_type(model: str, name: str):
    """The declared type of input ``name`` as offload reads it (for the random data's shape)."""
    import offload

    return {v.name: v.type for v in offload.load(model).main.inputs}[name]


def test_inspect_shows_the_placement_compile_makes(example_model, tmp_path, capsys):
    written = len(onnx.load(example_model).graph.node)
    assert main(["compile", example_model, "--backend", "example", "-o", str(tmp_path / "m.pte")]) == 0
    compiled = re.search(r"delegated (\d+)/(\d+) ops", capsys.readouterr().out).groups()
    assert main(["inspect", example_model, "--backend", "example"]) == 0
    printed = capsys.readouterr().out
    assert f"graph passes: {written} -> {compiled[1]} ops" in printed
    assert re.search(r"delegated ops: (\d+)/(\d+)", printed).groups() == compiled
    assert main(["inspect", example_model, "--backend", "example", "--no-passes", "--ir"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"delegated ops: \d+/(\d+)", printed).group(1) == str(written)
    assert "= BatchNormalization(X=%c1" in printed and "graph passes" not in printed
    assert main(["inspect", example_model, "--ir"]) == 0
    assert "BatchNormalization" not in capsys.readouterr().out  # folded into the Conv, as compile does


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["compile", "{model}", "-o", "/nonexistent/dir/m.pte"],
            "-o /nonexistent/dir/m.pte: the folder /nonexistent/dir does not exist",
        ),
        (["compile", "{model}", "-o", "{tmp}"], "is a folder; give a file name"),
        (
            ["report", "{model}", "--backend", "example", "-o", "/nonexistent/r.html"],
            "the folder /nonexistent does not exist",
        ),
        (
            ["run", "{model}", "--output", "/nonexistent/dir/o.npz"],
            "--output /nonexistent/dir/o.npz: the folder",
        ),
        (["run", "{model}", "--profile", "/nonexistent/t.json"], "--profile /nonexistent/t.json: the folder"),
        (
            ["run", "{model}", "--input-dir", "{tmp}/none", "--output-dir", "{tmp}/out"],
            "--input-dir {tmp}/none: no such folder",
        ),
        (["run", "{model}", "--input-dir", "{model}", "--output-dir", "{tmp}/out"], "not a folder"),
        (["run", "{text}"], "{text}: not a .pte file"),
        (["inspect", "{text}"], "{text}: not a .pte file"),
        (["run", "{model}", "--backend", "tpu"], "no backend named 'tpu'"),
        (["run", "{pte}", "--backend", "example"], "--backend needs a model file"),
        (
            ["run", "{model}", "--backend", "example", "--spec", "opencl.precision=fp16"],
            "--spec names backend(s) ['opencl']",
        ),
        (["run", "{model}", "--deny-op", "Relu"], "need --backend NAME"),
        (["inspect", "{pte}", "--passes"], "--passes needs a model file"),
    ],
)
def test_bad_paths_and_arguments_are_one_line_and_exit_2(example_model, tmp_path, capsys, argv, message):
    text = tmp_path / "notes.pte"
    text.write_text("a text file, not a program\n")
    pte = tmp_path / "m.pte"
    assert main(["compile", example_model, "-o", str(pte)]) == 0
    capsys.readouterr()
    names = {"{model}": example_model, "{tmp}": str(tmp_path), "{text}": str(text), "{pte}": str(pte)}

    def fill(s: str) -> str:
        for k, v in names.items():
            s = s.replace(k, v)
        return s

    assert main([fill(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("offload: error:") and fill(message) in err and "\n" not in err, err
    assert "ONNX" not in err


@needs_opencl
def test_the_readme_commands_work_as_written(tmp_path, capsys, monkeypatch):
    """The offload commands of the README's first command line, run in a copy of examples/."""
    with open(os.path.join(ROOT, "README.md")) as f:
        block = f.read().split("```sh\n", 1)[1].split("```", 1)[0]
    steps = [shlex.split(s) for s in block.strip().split(" && ")]
    offload_steps = [s[1:] for s in steps if s[0] == ".venv/bin/offload"]
    assert [s[0] for s in offload_steps] == ["inspect", "compile", "run"]
    (tmp_path / "examples").mkdir()
    monkeypatch.chdir(tmp_path)
    build = next(s for s in steps if s[0] == ".venv/bin/python")
    # the script writes beside itself by default; here into the copy's examples/
    subprocess.run([sys.executable, os.path.join(ROOT, build[1]), "examples/tiny_cnn.onnx"], check=True)
    for argv in offload_steps:
        assert main(argv) == 0, argv
    printed = capsys.readouterr().out
    assert "random inputs (no --input given, seed 0): image float32[1, 3, 32, 32]" in printed
    assert "probs: float32[1, 10]" in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run"], "the following arguments are required: model (see offload run --help)"),
        (["inspect", "m.onnx", "--passes", "--no-passes"], "--no-passes: not allowed with argument --passes"),
        (["run", "m.onnx", "--seed", "x"], "--seed: invalid int value: 'x'"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("offload: error:") and message in err and "\n" not in err, err
