"""The constants of the compiled loops' float32 erf, GELU, exp and tanh (``loops.erf32``,
``loops.gelu32``, ``loops.sigmoid32``, ``loops.tanh32``), shared with their numpy twins in ``approximations`` (without importing numba)."""

import math

import numpy as np

# erf(x) / x as a rational function of t = x² on |x| < 4, fitted by least squares on relative
# error: relative error at most 1.7e-8 there (float32's half ulp is 6e-8); erf is ±1 to float32
# beyond 4.
ERF_P = (1.1283791690963676, 0.18505284833161995, 0.05409854500993849, 0.0038174504061146697,
         0.00037081685625883504, 4.454565821186002e-06, -1.2001797639049627e-08)  # fmt: skip
ERF_Q = (1.0, 0.49733221703508046, 0.11372056788770706, 0.01536736890432316, 0.0012891641850924116,
         6.092407087988916e-05)  # fmt: skip

GELU_SCALE = 0.7071067811865476  # 1/√2 in float64: GELU's erf argument is x · GELU_SCALE

# exp of float32 values (``loops._exp32``): x clamped to [EXP_LO, EXP_HI] (exp's float32 range),
# n = floor(x · log2(e) + 1/2), r = x − n · LN2_HI − n · LN2_LO (Cody and Waite's two-part ln 2:
# n · LN2_HI is exact for |n| < 2^9), exp(r) by its Taylor polynomial of degree 7 (|r| <= 0.35:
# truncation below 1.2e-8 relative), times 2^n built from its exponent bits in two factors (so
# that n = 128 and n = -126 stay normal). All in float32: within one ulp of the correctly
# rounded exp over the range (measured on 2^20 uniform values: 90% exact).
F32 = np.float32
EXP_LO, EXP_HI = F32(-87.33654), F32(88.72283)
LOG2E = F32(1.4426950408889634)
LN2_HI, LN2_LO = F32(0.693359375), F32(-2.12194440e-4)
EXP_TAYLOR = tuple(F32(1.0 / math.factorial(k)) for k in range(8))

# tanh of float32 values (``loops._tanh32``): below TANH_SPLIT in magnitude the odd polynomial
# x + x · z · P(z), z = x², of Cephes' tanhf (Moshier's published coefficients); from there on
# 1 − 2 / (exp(2|x|) + 1) by ``_exp32``, with x's sign. Measured within 2 float32 ulps of
# float64's tanh (2^20 values).
TANH_SPLIT = F32(0.625)
TANH_P = tuple(F32(c) for c in (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2,
                                -5.70498872745e-3))  # fmt: skip
