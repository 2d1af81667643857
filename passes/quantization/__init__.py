"""Precision passes: running a float32 model in float16 inside."""
