"""DynamicQuantizeLSTM (runtime/kernels/recurrent_quantized.py): the integer products in float32,
exact sums against numpy's int64 products; the compiled step against onnxruntime, and the same
bits as the numpy step. The op's other cases against onnxruntime are in
tests/frontends/test_onnx_contrib_lstm.py."""

from __future__ import annotations

import numpy as np
import pytest

import offload
from offload.runtime.kernels import recurrent_quantized as rq
from offload.runtime.kernels._util import compiled_loops
from offload.runtime.kernels.recurrent_quantized import _integer_product
from tests.frontends.test_onnx_contrib_lstm import TOLERANCE, _case, onnxruntime_run

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("low", [200, -255])
def test_integer_product_is_the_exact_sum_rounded_once(low):
    """Terms up to 255 · 255 over 700 rows: sums up to 4.6e7, past float32's exact integers
    (2^24), so the product runs in slices; each sum is rounded to float32 once, as an int32 sum
    converted to float. With low 200 every term is positive and large: one float32 product of
    all 700 rows rounds its partial sums (checked, so that the test can tell)."""
    a = RNG.integers(low, 256, (3, 700)).astype(np.float32)
    w = RNG.integers(low, 256, (700, 40)).astype(np.float32)
    exact = (a.astype(np.int64) @ w.astype(np.int64)).astype(np.float32)
    np.testing.assert_array_equal(_integer_product(a, w, 255.0), exact)
    if low > 0:
        assert not np.array_equal(a @ w, exact)


def test_integer_product_of_zeros():
    a = np.zeros((2, 5), np.float32)
    w = RNG.integers(-128, 128, (5, 3)).astype(np.float32)
    np.testing.assert_array_equal(_integer_product(a, w, 128.0), np.zeros((2, 3), np.float32))


# The compiled step (runtime/kernels/recurrent_quantized_loops.py): the same bits as the numpy
# step, and onnxruntime's values, with sequence lengths, peepholes, clip and the coupled gate.
STEP_CASES = [
    ("bidirectional", np.int8, True, ("b", "lens", "h0", "c0", "p"), {}),
    ("reverse", np.uint8, False, ("b", "lens", "c0"), {"clip": 0.3}),
    ("forward", np.uint8, True, ("p", "h0"), {"input_forget": 1}),
]


@pytest.mark.parametrize("direction,dtype,per_column,optional,attrs", STEP_CASES)
def test_compiled_step_is_the_numpy_step_and_matches_onnxruntime(
    direction, dtype, per_column, optional, attrs, monkeypatch
):
    if compiled_loops() is None:
        pytest.skip("numba is not installed here (or OFFLOAD_JIT=0)")
    quant, _, feeds = _case(direction, dtype, per_column, optional, **attrs)
    want = onnxruntime_run(quant, feeds)
    module = offload.runtime.load(offload.save(offload.load(quant)))
    taken = []
    monkeypatch.setattr(rq, "_compiled_direction", _counted(rq._compiled_direction, taken))
    got = module.run(feeds)
    assert taken, "the compiled step did not run"
    monkeypatch.setattr(rq, "_step_loops", lambda *a: None)
    numpy_step = module.run(feeds)
    assert len(taken) == (2 if direction == "bidirectional" else 1)  # the numpy step ran after
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **TOLERANCE)
        np.testing.assert_array_equal(got[k], numpy_step[k], err_msg=k)


def _counted(fn, calls: list):
    def counted(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    return counted


def test_other_activations_take_the_numpy_step():
    assert rq._step_loops(["HardSigmoid", "Tanh", "Relu"], 1, 4) is None
    assert rq._step_loops(None, 1, rq._LOOPS_MAX_HIDDEN + 1) is None
