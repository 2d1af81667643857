"""Passes over QuantizeLinear / DequantizeLinear."""
