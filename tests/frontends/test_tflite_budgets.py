"""TFLite window ops that ask for more than the machine's budgets are refused at import, from
the shapes and options the file declares, before anything is padded or allocated; the same ops
of ordinary sizes import and match LiteRT."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import offload
from offload.errors import ShapeError
from offload.schemas.generated.tflite.BuiltinOperator import BuiltinOperator
from tests.frontends.test_tflite import litert, needs_litert
from tests.frontends.tflite.build import window_model

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
X = [1, 8, 8, 4]

# Each asks for a padded input of 4 x 30,650 x 30,650 floats (14 GiB, under the 16 GiB default
# constant): a 30,643-wide SAME window, or a 3 x 3 filter dilated 15,321 times.
LARGE = {
    "maxpool-14gib": (BuiltinOperator.MAX_POOL_2D, {"window": (30643, 30643)}),
    "depthwise-14gib": (BuiltinOperator.DEPTHWISE_CONV_2D, {"dilation": (15321, 15321)}),
}


@needs_litert
@pytest.mark.parametrize(
    "op, options",
    [
        (BuiltinOperator.MAX_POOL_2D, {"window": (3, 3)}),
        (BuiltinOperator.AVERAGE_POOL_2D, {"window": (5, 5)}),
        (BuiltinOperator.AVERAGE_POOL_2D, {"window": (8, 8), "same": False}),
        (BuiltinOperator.DEPTHWISE_CONV_2D, {"dilation": (3, 2)}),
    ],
    ids=["maxpool-3x3", "averagepool-5x5", "averagepool-global", "depthwise-dilated"],
)
def test_window_ops_of_ordinary_sizes_match_litert(op, options):
    y = [1, 1, 1, 4] if options.get("same") is False else X
    model = window_model(op, X, y, **options)
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    module = offload.runtime.load(offload.save(offload.load(model)))
    (got,) = module.run({"x": x}).values()
    (want,) = litert(model, {"x": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


_CHILD = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import offload
from offload.ir import types
print(types.MAX_TENSOR_BYTES)
for path in sys.argv[1:]:
    start = time.monotonic()
    try:
        offload.load(open(path, "rb").read())
        print("loaded", path)
    except Exception as e:
        print(f"{time.monotonic() - start:.3f}", type(e).__module__, type(e).__name__, e)
"""


def test_under_a_4_gib_address_space_a_14_gib_window_is_refused_at_import(tmp_path):
    """A child process limited to 4 GiB of address space: the tensor budget is a quarter of it,
    and both models are refused from their declared shapes in well under a second (before, the
    MaxPool padded its input until a MemoryError)."""
    paths = []
    for name, (op, options) in LARGE.items():
        paths.append(tmp_path / f"{name}.tflite")
        paths[-1].write_bytes(window_model(op, X, X, **options))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OFFLOAD_MAX_TENSOR_BYTES", None)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, paths)], capture_output=True, text=True, env=env, timeout=120
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stderr[-3000:]
    budget = min(GIB, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4)
    assert int(lines[0]) == budget
    padded = 4 * 30650 * 30650 * 4
    for line, op in zip(lines[1:], ("MaxPool", "Conv")):
        seconds, module, kind, message = line.split(" ", 3)
        assert module == "offload.errors" and kind == "ShapeError", line
        assert float(seconds) < 1, line
        assert f"{op} '" in message and "(padded input)" in message, line
        assert f"would take {padded} bytes, over the {budget}-byte limit" in message, line
        assert "OFFLOAD_MAX_TENSOR_BYTES" in message, line
        if budget == GIB:
            assert "a quarter of the 4 GiB address-space limit (RLIMIT_AS)" in message, line


def test_a_pool_window_whose_work_passes_the_budget_is_refused_at_import():
    """A 4,096 x 4,096 window over an 8 x 8 map: its padded input (64 MiB) fits the tensor
    budget, its 16.8 million taps per output do not fit the work budget."""
    model = window_model(BuiltinOperator.AVERAGE_POOL_2D, [1, 8, 8, 1], [1, 8, 8, 1], window=(4096, 4096))
    start = time.monotonic()
    with pytest.raises(ShapeError) as info:
        offload.load(model)
    assert time.monotonic() - start < 1
    taps = 4096 * 4096
    message = str(info.value)
    assert f"AveragePool 'AveragePool': a window of {taps} taps (4096 x 4096) over 64 outputs" in message
    assert f"would take {taps * (64 + (1 << 14))} element steps" in message
    assert "set OFFLOAD_MAX_WINDOW_WORK to change it" in message
