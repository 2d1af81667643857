"""Schemas of the formats offload reads and writes, and the code generated from them."""
