"""Fixtures of the CPU executor's tests: depthwise convolutions by the compiled loops or by numpy."""

from __future__ import annotations

import pytest

from offload.runtime.kernels import _util, conv_recipe


@pytest.fixture(params=["compiled", "numpy"])
def conv_loops(request, monkeypatch):
    """Runs a test twice: depthwise convs by the compiled loops (runtime/kernels/loops.py, the
    ``direct`` path) and by the numpy paths that take them where numba is missing or
    ``OFFLOAD_JIT=0`` (``rows``, ``last`` and the depthwise + pointwise chains). The value is
    the name; ``harness.plan_path`` maps a numpy path to the one the test should see."""
    if request.param == "compiled" and _util.compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    if request.param == "numpy":
        monkeypatch.setattr(_util, "_LOOPS", False)
    conv_recipe._recipe.cache_clear()  # recipes made under the other setting keep their path
    yield request.param
    conv_recipe._recipe.cache_clear()


@pytest.fixture
def numpy_convs(monkeypatch):
    """Depthwise convs by the numpy paths only (the compiled loops off, as OFFLOAD_JIT=0 does):
    for the tests of those paths and of the chains they make."""
    monkeypatch.setattr(_util, "_LOOPS", False)
    conv_recipe._recipe.cache_clear()
    yield
    conv_recipe._recipe.cache_clear()
