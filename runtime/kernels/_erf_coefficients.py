"""The coefficients of float32 erf and GELU, shared by the compiled loops (``loops.erf32``,
``loops.gelu32``) and their numpy twins in ``elementwise`` (without importing numba)."""

# erf(x) / x as a rational function of t = x² on |x| < 4, fitted by least squares on relative
# error: relative error at most 1.7e-8 there (float32's half ulp is 6e-8); erf is ±1 to float32
# beyond 4.
ERF_P = (1.1283791690963676, 0.18505284833161995, 0.05409854500993849, 0.0038174504061146697,
         0.00037081685625883504, 4.454565821186002e-06, -1.2001797639049627e-08)  # fmt: skip
ERF_Q = (1.0, 0.49733221703508046, 0.11372056788770706, 0.01536736890432316, 0.0012891641850924116,
         6.092407087988916e-05)  # fmt: skip

GELU_SCALE = 0.7071067811865476  # 1/√2 in float64: GELU's erf argument is x · GELU_SCALE
