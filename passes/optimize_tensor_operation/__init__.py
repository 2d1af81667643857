"""Passes over tensor-shaping ops: Concat, Slice, Reshape, OneHot."""
