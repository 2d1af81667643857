"""The fixed-point rules behind offload.tflite's integer kernels, and their errors.

Whole models are checked against LiteRT in tests/frontends/test_tflite.py; here the building
blocks against their published definitions (gemmlowp's rounding rules, TFLite's
QuantizeMultiplier) and real arithmetic."""

import numpy as np
import pytest

import offload
from offload.errors import KernelError
from offload.runtime.kernels import fixed_point as fp
from offload.runtime.kernels.tflite_int8 import add_parameters

HERE = "tests/frontends/tflite"


def test_quantize_multiplier_is_a_q31_mantissa_and_an_exponent():
    assert fp.quantize_multiplier(0.75) == (round(0.75 * 2**31), 0)
    assert fp.quantize_multiplier(1.0) == (2**30, 1)  # frexp: 0.5 · 2^1
    mantissa, exponent = fp.quantize_multiplier(0.0123)
    assert 2**30 <= mantissa < 2**31 and mantissa * 2.0 ** (exponent - 31) == pytest.approx(0.0123, rel=1e-9)


def test_rounding_rules():
    # the high half of 2ab rounded to nearest, ties upward; the one overflowing case saturates
    assert fp.srdhm(2**30, 2**30) == 2**29
    assert fp.srdhm(-(2**31), -(2**31)) == 2**31 - 1
    assert fp.srdhm(3, 2**30) == 2 and fp.srdhm(-3, 2**30) == -1  # 1.5 → 2, -1.5 → -1
    # division by a power of two, rounded half away from zero
    np.testing.assert_array_equal(
        fp.rounding_divide_by_pot(np.array([5, -5, 6, -6, 7]), 1), [3, -3, 3, -3, 4]
    )
    assert fp.multiply_by_quantized_multiplier(1000, *fp.quantize_multiplier(0.3)) == 300


def test_reciprocal_is_one_over_x():
    x = np.arange(1, 256)
    mantissa, over_unit = fp.reciprocal(x)
    np.testing.assert_allclose(
        mantissa * 2.0 ** (-31 - over_unit), 1.0 / x, rtol=2**-27
    )  # three Newton steps


def test_leading_sign_bits():
    np.testing.assert_array_equal(
        fp.count_leading_sign_bits(np.array([0, 1, -1, 2, -2, 255, -256])), [31, 30, 31, 29, 30, 23, 23]
    )


def test_addition_multipliers_put_the_larger_ratio_in_2_20_to_2_21():
    a, b, shift = add_parameters(np.float32(0.7), np.float32(-0.2))
    assert 2**20 <= a < 2**21 and b < 0
    assert a / 2**shift == pytest.approx(0.7, rel=2**-20) and b / 2**shift == pytest.approx(-0.2, rel=2**-18)


def test_a_bad_table_is_a_kernel_error_naming_the_op():
    program = offload.load(f"{HERE}/cnn_int8.tflite")
    (lookup, *_) = [op for op in program.main.body.operations if op.op_type == "Lookup"]
    table = lookup.inputs[1]
    table.const_value = table.const_value[:10]
    with np.load(f"{HERE}/cnn_int8.npz") as z:
        feeds = {str(z["input_names"][0]): z["input_0"]}
    with pytest.raises(KernelError, match=r"offload\.tflite::Lookup"):
        offload.evaluate(program, feeds)
