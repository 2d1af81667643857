"""Passes that make matrix products ``Gemm``: bias, weight and transposes folded into one op."""
