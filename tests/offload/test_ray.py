"""Batch inference on Ray Data (a local cluster of 2 CPUs) equals a local loop over the same rows."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import offload
from offload.cli import main
from tests.delegates.opencl_support import model

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'offload[ray]')")
offload_ray = pytest.importorskip("offload.ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_symbolic_batch_model_gets_whole_padded_batches(cluster):
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    program = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", ["N", 4])], ["y"], [("w", w)])
    pte = offload.save(program)
    xs = np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32)
    rows = [{"x": x, "id": k} for k, x in enumerate(xs)]
    out = offload_ray.batch_inference(ray.data.from_items(rows), pte, batch_size=4).take_all()
    out.sort(key=lambda r: int(r["id"]))
    got = np.stack([r["y"] for r in out])
    np.testing.assert_allclose(got, xs @ w, rtol=1e-5, atol=1e-5)  # numpy's product, row by row
    assert [int(r["id"]) for r in out] == list(range(10))  # other columns pass through


def test_cli_runs_a_folder_on_ray_as_the_local_loop_does(cluster, example_model, tmp_path, capsys):
    pte = str(tmp_path / "tiny.pte")
    assert main(["compile", example_model, "-o", pte]) == 0
    inputs = tmp_path / "in"
    inputs.mkdir()
    rng = np.random.default_rng(2)
    for k in range(5):
        np.save(inputs / f"s{k}.npy", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert main(["run", pte, "--input-dir", str(inputs), "--output-dir", str(local)]) == 0
    assert main(["run", pte, "--input-dir", str(inputs), "--output-dir", str(remote), "--ray", "local"]) == 0
    assert "on Ray (local)" in capsys.readouterr().out
    names = sorted(os.listdir(local))
    assert names == sorted(os.listdir(remote)) == [f"s{k}.npz" for k in range(5)]
    session = ort.InferenceSession(example_model, providers=["CPUExecutionProvider"])
    for name in names:
        a, b = np.load(local / name), np.load(remote / name)
        assert a["probs"].shape == b["probs"].shape == (1, 10)
        np.testing.assert_allclose(a["probs"], b["probs"], rtol=1e-6, atol=1e-7)
        (want,) = session.run(None, {"image": np.load(inputs / name.replace(".npz", ".npy"))})
        np.testing.assert_allclose(b["probs"], want, rtol=1e-4, atol=1e-6)  # and onnxruntime's
