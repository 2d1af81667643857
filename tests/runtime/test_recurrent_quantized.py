"""DynamicQuantizeLSTM's integer products in float32 (runtime/kernels/recurrent_quantized.py):
exact sums against numpy's int64 products. The op's values against onnxruntime are in
tests/frontends/test_onnx_contrib_lstm.py."""

from __future__ import annotations

import numpy as np
import pytest

from offload.runtime.kernels.recurrent_quantized import _integer_product

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
