"""`offload compile --passes / --no-passes` and `offload inspect --passes`, on the bundled example."""

import numpy as np
import onnxruntime as ort
import pytest

from offload.cli import main


def _kernel_calls(pte, capsys) -> str:
    capsys.readouterr()
    assert main(["inspect", pte]) == 0
    return capsys.readouterr().out


def _run_matches_onnxruntime(pte, model, tmp_path, capsys):
    x = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", pte, "--input", f"image={tmp_path / 'x.npy'}", "--output", str(out)]) == 0
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(np.load(out)["probs"], want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "flags, batchnorm_left",
    [
        ([], False),  # the default pipeline
        (["--passes", "default"], False),
        (["--passes", "optimize_conv::fuse_conv_batchnorm,cleanup::dead_code_elimination"], False),
        (["--passes", "cleanup::noop_elimination"], True),
        (["--no-passes"], True),
    ],
)
def test_compile_runs_the_chosen_passes(example_model, tmp_path, capsys, flags, batchnorm_left):
    pte = str(tmp_path / "m.pte")
    assert main(["compile", example_model, "-o", pte, *flags]) == 0
    printed = capsys.readouterr().out
    assert ("graph passes: 10 -> 9 ops" in printed) == (not batchnorm_left)
    assert ("onnx::BatchNormalization" in _kernel_calls(pte, capsys)) == batchnorm_left
    _run_matches_onnxruntime(pte, example_model, tmp_path, capsys)


def test_compile_with_an_unknown_pass_is_a_one_line_error(example_model, tmp_path, capsys):
    assert main(["compile", example_model, "-o", str(tmp_path / "m.pte"), "--passes", "cleanup::nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("offload: error: unknown pass 'cleanup::nope'") and "\n" not in err
    assert not (tmp_path / "m.pte").exists()


def test_passes_and_no_passes_exclude_each_other(example_model, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["compile", example_model, "-o", str(tmp_path / "m.pte"), "--passes", "default", "--no-passes"])
    assert e.value.code == 2


def test_inspect_passes_prints_counts_before_and_after_and_each_change(example_model, capsys):
    assert main(["inspect", example_model, "--passes"]) == 0
    printed = capsys.readouterr().out
    assert "ops 10 -> 9" in printed
    rows = {line.split()[0]: line.split()[1:] for line in printed.splitlines() if line.startswith("    ")}
    assert rows["BatchNormalization"] == ["1", "0"] and rows["Conv"] == ["2", "2"]
    assert "round 1  optimize_conv::fuse_conv_batchnorm: BatchNormalization -1" in printed
    # the kernel calls below are those of the optimized program
    assert "onnx::BatchNormalization" not in printed and "2  onnx::Conv" in printed


def test_inspect_passes_needs_a_model_file(example_model, tmp_path, capsys):
    pte = str(tmp_path / "m.pte")
    assert main(["compile", example_model, "-o", pte]) == 0
    capsys.readouterr()
    assert main(["inspect", pte, "--passes"]) == 2
    assert "--passes needs a model file" in capsys.readouterr().err


def test_compile_with_add_fp16_cast_reports_the_error_per_output(example_model, tmp_path, capsys):
    """The error printed is the one numpy measures between the float32 model (onnxruntime) and
    the float16 .pte on the same seeded inputs."""
    import offload

    pte = tmp_path / "m.pte"
    assert main(["compile", example_model, "--passes", "quantization::add_fp16_cast", "-o", str(pte)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("float16 error of 'probs'"))
    printed = float(line.split("max abs ")[1].split(",")[0])
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = ort.InferenceSession(example_model, providers=["CPUExecutionProvider"]).run(
        ["probs"], {"image": x}
    )[0]
    got = offload.runtime.load(str(pte)).run({"image": x})["probs"]
    assert 0 < printed < 1e-2
    assert np.isclose(float(np.max(np.abs(got.astype(np.float64) - want))), printed, rtol=0.05, atol=1e-6)
