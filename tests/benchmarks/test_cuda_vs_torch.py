"""benchmarks/cuda_vs_torch.py's pieces that need no torch: the geometric means over models that
gpu-check's last line reports, the line's exact wording, and which rows the means leave out. The
script itself (torch, a GPU) runs in .ci/gpu-check; here it is imported without torch."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cuda_vs_torch.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("cuda_vs_torch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_the_script_imports_without_torch():
    # torch blocked as if absent: only the functions that build and time models import it
    code = (
        "import sys, importlib.util\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
        "            raise ImportError('no ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"spec = importlib.util.spec_from_file_location('cuda_vs_torch', {str(SCRIPT)!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)\n"
        "print(m.summary_line((1.0, None, 0.5)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == (
        "gpu: offload/torch-eager B1 1.00 | offload/torch-graphs G1 n/a | offload/torch-eager B32 0.50"
    )


def test_geometric_mean_of_given_ratios_against_logs_in_float64(bench):
    ratios = [0.5, 2.0, 1.7, 3.1]
    want = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    assert bench.geometric_mean(ratios) == pytest.approx(want, rel=1e-12)
    # rows with no ratio (failed, or no graphs on a CPU) are left out, not counted as 0 or 1
    assert bench.geometric_mean([None, 4.0, None, 1.0, math.inf, math.nan]) == pytest.approx(2.0, rel=1e-12)
    assert bench.geometric_mean([]) is None
    assert bench.geometric_mean([None, None]) is None


def test_the_last_line_has_the_exact_wording(bench):
    line = bench.summary_line((0.8731, 1.5, 12.345))
    assert (
        line
        == "gpu: offload/torch-eager B1 0.87 | offload/torch-graphs G1 1.50 | offload/torch-eager B32 12.35"
    )
    assert bench.summary_line((1.0, None, 2.0)) == (
        "gpu: offload/torch-eager B1 1.00 | offload/torch-graphs G1 n/a | offload/torch-eager B32 2.00"
    )
    assert bench.summary_line((None, None, None), large=4, prefix="fp16") == (
        "fp16: offload/torch-eager B1 n/a | offload/torch-graphs G1 n/a | offload/torch-eager B4 n/a"
    )


def test_means_over_rows_leave_out_failed_rows_and_the_other_precision(bench):
    Row = bench.Row
    rows = [
        Row("a", 1, "fp32", offload_ms=2.0, eager_ms=1.0, graphs_ms=0.5),
        Row("b", 1, "fp32", offload_ms=3.0, eager_ms=6.0, graphs_ms=1.0),
        Row("c", 1, "fp32", error="error: RuntimeError: export failed"),
        Row("a", 32, "fp32", offload_ms=10.0, eager_ms=20.0, graphs_ms=10.0),
        Row("b", 32, "fp32", error="skipped: time budget spent"),
        Row("a", 1, "fp16", offload_ms=9.0, eager_ms=1.0, graphs_ms=1.0),
    ]
    b1, g1, b32 = bench.means(rows, "fp32", 32)
    assert b1 == pytest.approx(math.sqrt((2.0 / 1.0) * (3.0 / 6.0)), rel=1e-12)
    assert g1 == pytest.approx(math.sqrt((2.0 / 0.5) * (3.0 / 1.0)), rel=1e-12)
    assert b32 == pytest.approx(0.5, rel=1e-12)
    assert bench.means(rows, "fp16", 32) == (pytest.approx(9.0), pytest.approx(9.0), None)
    # a CPU dry run has no graphs: G1 is n/a
    cpu = [
        Row("a", 1, "fp32", offload_ms=2.0, eager_ms=4.0),
        Row("a", 32, "fp32", offload_ms=8.0, eager_ms=4.0),
    ]
    assert bench.summary_line(bench.means(cpu, "fp32", 32)) == (
        "gpu: offload/torch-eager B1 0.50 | offload/torch-graphs G1 n/a | offload/torch-eager B32 2.00"
    )


def test_a_failed_row_prints_its_error_and_a_row_that_ran_its_numbers(bench):
    failed = bench.Row("vit_b_16", 32, "fp16", error=bench.one_line_error(ValueError("bad\n  shape (1, 2)")))
    assert bench.format_row(failed).split() == [
        "vit_b_16",
        "32",
        "fp16",
        "error:",
        "ValueError:",
        "bad",
        "shape",
        "(1,",
        "2)",
    ]
    ran = bench.Row(
        "resnet50", 1, "fp32", offload_ms=2.5, eager_ms=5.0, graphs_ms=None, max_diff=3e-6, ref_max=4.0
    )
    assert bench.format_row(ran).split() == [
        "resnet50",
        "1",
        "fp32",
        "2.50",
        "5.00",
        "n/a",
        "0.50",
        "n/a",
        "3.0e-06",
        "4.00e+00",
        "ok",
    ]
    assert len(bench.format_row(ran)) == len(bench.HEADER)
    # beyond the precision's share of torch's scale the row is marked, not dropped
    off = bench.Row("resnet50", 1, "fp32", offload_ms=2.5, eager_ms=5.0, max_diff=5e-3, ref_max=4.0)
    assert bench.format_row(off).split()[-1] == "DIFFERS"
    assert bench.means([off], "fp32", 32)[0] == pytest.approx(0.5)
    half = bench.Row("resnet50", 1, "fp16", offload_ms=2.5, eager_ms=5.0, max_diff=5e-3, ref_max=4.0)
    assert half.agrees()


def test_max_abs_diff_against_numpy_float64(bench):
    import numpy as np

    rng = np.random.default_rng(0)
    want = rng.standard_normal((2, 10)).astype(np.float32)
    got = want + np.float32(1e-3) * rng.standard_normal((2, 10)).astype(np.float32)
    diff, scale = bench.max_abs_diff({"output": got}, (want,))
    assert diff == np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))
    assert scale == np.max(np.abs(want))
    with pytest.raises(ValueError, match="shape"):
        bench.max_abs_diff([got], [want[:1]])
