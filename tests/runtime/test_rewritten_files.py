"""A loaded module keeps its answers when its .pte is saved over (``offload.save`` writes a new file
and renames it over the path; an in-place rewrite would end the process with SIGBUS or change
the module's answers). Each case runs in a child process, so a SIGBUS fails the test instead of
ending pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import offload
from offload.files import replace_file

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    import offload

    def model(weight):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(weight, "w")],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    def reference(onnx_bytes, x):
        return ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    path, how = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    first = model(rng.standard_normal((256, 256)).astype(np.float32))
    offload.save(offload.load(first), path)
    module = offload.runtime.load(path)
    want = reference(first, x)
    if how == "shorter":  # a much smaller file: an in-place rewrite leaves the mapping past its end
        other = model(np.ones((256, 1), np.float32))
    else:  # same size, other weights: an in-place rewrite would change the answers silently
        other = model(rng.standard_normal((256, 256)).astype(np.float32))
    offload.save(offload.load(other), path)
    np.testing.assert_allclose(module.run({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    fresh = offload.runtime.load(path).run({"x": x})["y"]  # the path now holds the new model
    np.testing.assert_allclose(fresh, reference(other, x), rtol=1e-4, atol=1e-4)
    print("kept")
    """
)


@pytest.mark.parametrize("how", ["shorter", "same-size"])
def test_a_module_keeps_its_answers_when_its_file_is_saved_over(how, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "m.pte"), how],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, f"child ended with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split() == ["kept"]


def test_replace_file_keeps_the_mode_follows_links_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.pte"
    link.symlink_to(target)
    replace_file(link, [b"new ", b"bytes"])
    assert link.is_symlink() and target.read_bytes() == b"new bytes"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.pte", "m.pte"]


def test_a_failed_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "m.pte"
    target.write_bytes(b"old")

    def chunks():
        yield b"half"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(target, chunks())
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.pte"]


def test_save_writes_a_new_file_over_the_path(tmp_path, example_model):
    path = tmp_path / "m.pte"
    path.write_bytes(b"placeholder")
    before = path.stat().st_ino
    offload.save(offload.load(example_model), path)
    assert path.stat().st_ino != before  # renamed over, not truncated in place
    assert offload.runtime.load(path).method_names == ["forward"]
