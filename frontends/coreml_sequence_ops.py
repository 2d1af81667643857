"""MIL op rules: recurrent layers, attention, and the compressed-weight ops (constexpr_*,
quantize/dequantize), with MIL's semantics written in ONNX ops."""

from __future__ import annotations
